package tunnel_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// tlsQuery is the query of a URL naming the CA and the client certificate
// of certs.
func tlsQuery(certs redistest.Certs) string {
	return "tls_ca=" + url.QueryEscape(certs.CA) + "&" + certQuery(certs)
}

// certQuery names the client certificate of certs and its key.
func certQuery(certs redistest.Certs) string {
	return "tls_cert=" + url.QueryEscape(certs.ClientCert) + "&tls_key=" + url.QueryEscape(certs.ClientKey)
}

// Mutual TLS with the CA, certificate and key named in the URL, against a
// redis-server that requires client certificates.
func TestOpenTLSParams(t *testing.T) {
	t.Parallel()
	ctx := openCtx(t)
	certs := redistest.GenerateCerts(t)
	srv := redistest.Start(t, redistest.WithTLS(certs, true))
	other := redistest.GenerateCerts(t)

	for _, u := range []string{
		srv.TLSURL() + "?" + tlsQuery(certs),
		srv.TLSURL() + "?" + tlsQuery(certs) + "&tls_server_name=" + redistest.ServerName,
		srv.TLSURL() + "?" + tlsQuery(certs) + "&dial_timeout=3s&pool_size=8",
	} {
		rdb := mustOpen(t, ctx, u)
		if err := rdb.Set(ctx, "k", u, 0).Err(); err != nil {
			t.Fatalf("SET over %s: %v", u, err)
		}
		if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != u {
			t.Fatalf("GET over %s = %q, %v", u, got, err)
		}
	}
	// The same data through the plaintext port: it was one server.
	if got, err := srv.Client(t).Get(ctx, "k").Result(); err != nil || !strings.HasPrefix(got, "rediss://") {
		t.Fatalf("GET k on the plaintext port = %q, %v", got, err)
	}

	for _, tc := range []struct{ name, url, want string }{
		{"no client certificate", srv.TLSURL() + "?tls_ca=" + url.QueryEscape(certs.CA), "give ?tls_cert= and ?tls_key="},
		{"not the CA (system roots)", srv.TLSURL() + "?" + certQuery(certs), "with ?tls_ca="},
		{"server name not in the certificate", srv.TLSURL() + "?" + tlsQuery(certs) + "&tls_server_name=other.rpr.test", "with ?tls_server_name="},
		{"client certificate of another CA", srv.TLSURL() + "?tls_ca=" + url.QueryEscape(certs.CA) + "&" + certQuery(other), "does not accept the client certificate"},
	} {
		rdb, err := tunnel.Open(ctx, tc.url)
		if err == nil {
			_ = rdb.Close()
			t.Errorf("%s: Open(%s) succeeded", tc.name, tc.url)
			continue
		}
		t.Logf("%s: %v", tc.name, err)
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

// The TLS parameters reach the Cluster and the Sentinel clients too: with
// a standalone TLS server behind them, each fails past the handshake,
// saying what the server is not.
func TestOpenTLSParamsClusterAndSentinelForms(t *testing.T) {
	t.Parallel()
	ctx := openCtx(t)
	certs := redistest.GenerateCerts(t)
	a := redistest.Start(t, redistest.WithTLS(certs, true))
	b := redistest.Start(t, redistest.WithTLS(certs, true))

	u := "rediss://" + a.TLSAddr() + "," + b.TLSAddr() + "?" + tlsQuery(certs)
	if _, err := tunnel.Open(ctx, u); err == nil || !strings.Contains(err.Error(), "not a Redis Cluster") {
		t.Errorf("Open(%s) = %v, want the seed list refused for not being Cluster nodes", u, err)
	}
	u = "rediss+sentinel://" + a.TLSAddr() + "/rpr?" + tlsQuery(certs)
	if _, err := tunnel.Open(ctx, u); err == nil || !strings.Contains(err.Error(), "sentinel "+a.TLSAddr()+": ") ||
		strings.Contains(err.Error(), "handshake") || strings.Contains(err.Error(), "x509") {
		t.Errorf("Open(%s) = %v, want the sentinel's own answer, past the TLS handshake", u, err)
	}
}

// rediss:// to a port without TLS fails within the dial, saying so.
func TestOpenTLSToPlaintextPort(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, u := range []string{
		"rediss://" + srv.Addr() + "/0",
		"rediss://" + srv.Addr() + "," + srv.Addr(),
		"rediss+sentinel://" + srv.Addr() + "/rpr",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		begin := time.Now()
		_, err := tunnel.Open(ctx, u)
		cancel()
		t.Logf("Open(%s) after %v: %v", u, time.Since(begin), err)
		if err == nil || !strings.Contains(err.Error(), "does not speak TLS") || !strings.Contains(err.Error(), "use redis://") {
			t.Errorf("Open(%s) = %v, want it to say the server does not speak TLS and to use redis://", u, err)
		}
	}
}

func TestOpenTLSBadParams(t *testing.T) {
	t.Parallel()
	certs := redistest.GenerateCerts(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a PEM file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	q := url.QueryEscape
	const host = "rediss://127.0.0.1:6380"
	for _, tc := range []struct {
		url  string
		want []string
	}{
		{host + "?tls_ca=" + q(missing), []string{"?tls_ca=" + missing, "no such file"}},
		{host + "?tls_ca=" + q(garbage), []string{"?tls_ca=" + garbage, "no PEM certificate"}},
		{host + "?tls_ca=" + q(certs.ClientKey), []string{"?tls_ca=" + certs.ClientKey, "no PEM certificate"}},
		{host + "?tls_cert=" + q(certs.ClientCert), []string{"?tls_cert=" + certs.ClientCert, "without ?tls_key="}},
		{host + "?tls_key=" + q(certs.ClientKey), []string{"?tls_key=" + certs.ClientKey, "without ?tls_cert="}},
		{host + "?tls_cert=" + q(missing) + "&tls_key=" + q(certs.ClientKey), []string{"?tls_cert=" + missing, "no such file"}},
		{host + "?tls_cert=" + q(certs.ClientCert) + "&tls_key=" + q(missing), []string{"?tls_key=" + missing, "no such file"}},
		{host + "?tls_cert=" + q(garbage) + "&tls_key=" + q(certs.ClientKey), []string{"?tls_cert=" + garbage, "no PEM certificate"}},
		{host + "?tls_cert=" + q(certs.ClientCert) + "&tls_key=" + q(certs.ClientCert), []string{"?tls_key=" + certs.ClientCert, "no PEM private key"}},
		{host + "?tls_cert=" + q(certs.ClientCert) + "&tls_key=" + q(certs.ServerKey), []string{"?tls_cert=" + certs.ClientCert, "?tls_key=" + certs.ServerKey, "does not match"}},
		{host + "?tls_ca=", []string{"?tls_ca= is empty"}},
		{host + "?tls_server_name=a&tls_server_name=b", []string{"?tls_server_name= given 2 times"}},
		{"redis://127.0.0.1:6379?tls_ca=" + q(certs.CA), []string{"?tls_ca= is a TLS parameter", "redis:// does not use TLS", "use rediss://"}},
		{"redis://127.0.0.1:6379?skip_verify=true", []string{"?skip_verify= is a TLS parameter", "use rediss://"}},
		{"redis://h1:1,h2:2?tls_cert=c&tls_key=k", []string{"?tls_cert= is a TLS parameter"}},
		{"redis+sentinel://127.0.0.1:26379/rpr?tls_server_name=x", []string{"?tls_server_name= is a TLS parameter", "use rediss+sentinel://"}},
		{"unix:///run/redis.sock?tls_ca=" + q(certs.CA), []string{"?tls_ca= is a TLS parameter"}},
		{"rediss+sentinel://127.0.0.1:26379/rpr?tls_ca=" + q(garbage), []string{"?tls_ca=" + garbage, "no PEM certificate"}},
		{"rediss://h1:1,h2:2?tls_ca=" + q(missing), []string{"?tls_ca=" + missing}},
		{host + "?tls_bogus=1", []string{"tls_bogus"}},
	} {
		// Every one fails before dialling: no server needed.
		_, err := tunnel.Open(context.Background(), tc.url)
		if err == nil {
			t.Errorf("Open(%q) succeeded", tc.url)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%q) = %v\nwant it to mention %q", tc.url, err, w)
			}
		}
	}
}
