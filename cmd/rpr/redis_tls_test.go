package main

import (
	"net/url"
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/internal/redistest"
)

// --redis takes the TLS parameters, and rediss:// to a plaintext port is a
// connection error (exit 2) that says the server does not speak TLS.
func TestRedisFlagTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.GenerateCerts(t)
	rs := redistest.Start(t, redistest.WithTLS(certs, true))
	q := url.QueryEscape
	tlsURL := rs.TLSURL() + "?tls_ca=" + q(certs.CA) + "&tls_cert=" + q(certs.ClientCert) + "&tls_key=" + q(certs.ClientKey)
	if res := runCLI(t, "", "ls", "--redis", tlsURL); res.code != 0 {
		t.Errorf("rpr ls --redis %s: %+v", tlsURL, res)
	}
	plain := "rediss://" + rs.Addr() + "/0"
	if res := runCLI(t, "", "ls", "--redis", plain); res.code != 2 || !strings.Contains(res.stderr, "does not speak TLS") {
		t.Errorf("rpr ls --redis %s: %+v, want exit 2 saying the server does not speak TLS", plain, res)
	}
	noKey := rs.TLSURL() + "?tls_cert=" + q(certs.ClientCert)
	if res := runCLI(t, "", "ls", "--redis", noKey); res.code != 2 || !strings.Contains(res.stderr, "without ?tls_key=") {
		t.Errorf("rpr ls --redis %s: %+v, want exit 2 naming the missing ?tls_key=", noKey, res)
	}
}
