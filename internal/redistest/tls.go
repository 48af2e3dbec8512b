package redistest

// TLS for tests: GenerateCerts makes a throwaway CA with a server and a
// client certificate, as PEM files in a temporary directory, and WithTLS
// makes Start listen for TLS on a second port with them:
//
//	certs := redistest.GenerateCerts(t)
//	srv := redistest.Start(t, redistest.WithTLS(certs, true)) // client certificates required
//	url := srv.TLSURL()                                       // "rediss://127.0.0.1:TLSPORT/0"
//
// The plaintext port stays open (readiness is checked on it, and tests of
// a TLS client dialling a plaintext port use it).

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// ServerName is a DNS name in the server certificate of GenerateCerts,
// besides 127.0.0.1, ::1 and localhost: a name to check a TLS server name
// option against.
const ServerName = "redis.rpr.test"

// Certs names the PEM files GenerateCerts wrote.
type Certs struct {
	// CA is the certificate of the CA that signed the two others.
	CA string
	// ServerCert and ServerKey are for redis-server (names 127.0.0.1,
	// ::1, localhost and ServerName).
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate for mutual TLS.
	ClientCert, ClientKey string
}

// GenerateCerts creates a CA, a server and a client certificate (ECDSA
// P-256, valid for a day) and writes them as PEM files to a t.TempDir().
func GenerateCerts(tb testing.TB) Certs {
	tb.Helper()
	dir := tb.TempDir()
	now := time.Now()
	caKey := newKey(tb)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatalf("redistest: CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatalf("redistest: CA certificate: %v", err)
	}
	c := Certs{CA: filepath.Join(dir, "ca.pem")}
	writePEM(tb, c.CA, "CERTIFICATE", caDER)

	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, hosts bool) (certFile, keyFile string) {
		key := newKey(tb)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if hosts {
			tmpl.DNSNames = []string{"localhost", ServerName}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			tb.Fatalf("redistest: %s certificate: %v", name, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			tb.Fatalf("redistest: %s key: %v", name, err)
		}
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(tb, certFile, "CERTIFICATE", der)
		writePEM(tb, keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	c.ServerCert, c.ServerKey = leaf(2, "server", x509.ExtKeyUsageServerAuth, true)
	c.ClientCert, c.ClientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth, false)
	return c
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("redistest: key: %v", err)
	}
	return key
}

func writePEM(tb testing.TB, path, blockType string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
}

// tlsSetup is what WithTLS configures.
type tlsSetup struct {
	certs       Certs
	authClients bool
}

// WithTLS makes the server also listen for TLS on a second free port
// (Server.TLSAddr, Server.TLSURL) with the server certificate of certs.
// With authClients, clients must present a certificate signed by
// certs.CA (Redis's tls-auth-clients yes); without, none is asked for.
func WithTLS(certs Certs, authClients bool) Option {
	return func(c *config) { c.tls = &tlsSetup{certs: certs, authClients: authClients} }
}

// directives returns the redis.conf lines of WithTLS for port.
func (t *tlsSetup) directives(port int) [][2]string {
	auth := "no"
	if t.authClients {
		auth = "yes"
	}
	return [][2]string{
		{"tls-port", strconv.Itoa(port)},
		{"tls-cert-file", strconv.Quote(t.certs.ServerCert)},
		{"tls-key-file", strconv.Quote(t.certs.ServerKey)},
		{"tls-ca-cert-file", strconv.Quote(t.certs.CA)},
		{"tls-auth-clients", auth},
	}
}

// TLSAddr returns "127.0.0.1:TLSPORT", the TLS port of a server started
// WithTLS ("" without).
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

// TLSURL returns "rediss://127.0.0.1:TLSPORT/0" for a server started
// WithTLS ("" without).
func (s *Server) TLSURL() string {
	if s.tlsPort == 0 {
		return ""
	}
	return "rediss://" + s.TLSAddr() + "/0"
}
