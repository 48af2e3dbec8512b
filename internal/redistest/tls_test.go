package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A server started WithTLS answers on its TLS port, to a client with the
// generated client certificate, also after Restart.
func TestWithTLS(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	certs := GenerateCerts(t)
	srv := Start(t, WithTLS(certs, true))
	if srv.TLSAddr() == "" || srv.TLSAddr() == srv.Addr() {
		t.Fatalf("TLSAddr() = %q, Addr() = %q: want a port of its own", srv.TLSAddr(), srv.Addr())
	}
	caPEM, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s holds no certificate", certs.CA)
	}
	cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.TLSAddr(), TLSConfig: &tls.Config{
		RootCAs: roots, Certificates: []tls.Certificate{cert}, ServerName: ServerName,
	}})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}
	tlsAddr := srv.TLSAddr()
	srv.Restart(t)
	if srv.TLSAddr() != tlsAddr {
		t.Fatalf("TLSAddr() after Restart = %q, want %q", srv.TLSAddr(), tlsAddr)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS after Restart: %v", err)
	}
	if plain := Start(t); plain.TLSAddr() != "" || plain.TLSURL() != "" {
		t.Fatalf("a server without WithTLS has TLSAddr %q, TLSURL %q", plain.TLSAddr(), plain.TLSURL())
	}
}
