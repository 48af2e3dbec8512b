package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serveBytes listens on loopback and, on each connection, reads once,
// writes reply (nothing if empty) and closes. It stops at the end of t.
func serveBytes(t *testing.T, reply string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			if reply != "" {
				_, _ = c.Write([]byte(reply))
			}
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// A server that answers the ClientHello at once with a RESP error (as some
// Redis versions and proxies do) is told apart from the record header
// alone, with no probe.
func TestTLSDialerRESPReplyToClientHello(t *testing.T) {
	t.Parallel()
	addr := serveBytes(t, "-ERR Protocol error: unbalanced quotes in request\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := newTLSDialer(&tls.Config{ServerName: "localhost"})
	for range 2 { // the second dial probes at once: the address is known plaintext
		_, err := d.Dial(ctx, "tcp", addr)
		var notTLS *notTLSError
		if !errors.As(err, &notTLS) || !strings.HasPrefix(notTLS.reply, "-ERR") || !strings.Contains(err.Error(), "use redis://") {
			t.Fatalf("Dial = %v, want a notTLSError quoting the -ERR reply", err)
		}
	}
}

// A server that closes without a word, and answers PING no better, is a
// failed handshake, not a plaintext Redis.
func TestTLSDialerServerCloses(t *testing.T) {
	t.Parallel()
	addr := serveBytes(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := newTLSDialer(&tls.Config{ServerName: "localhost"}).Dial(ctx, "tcp", addr)
	var notTLS *notTLSError
	if err == nil || errors.As(err, &notTLS) || !strings.Contains(err.Error(), "TLS handshake with "+addr) {
		t.Fatalf("Dial = %v, want a failed TLS handshake", err)
	}
}

// Under TLS 1.3 a server that wants a client certificate may answer the
// client's first write by resetting the connection instead of with its
// alert: without a certificate configured, the error still says which
// parameters to give; with one, or without TLS, a reset says nothing
// about certificates.
func TestRefusedCertHintForAResetAfterTheHandshake(t *testing.T) {
	reset := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}
	withCert := &tls.Config{Certificates: []tls.Certificate{{}}}
	if got := refusedCertHint(reset, &tls.Config{}); !strings.Contains(got, "give ?tls_cert= and ?tls_key=") {
		t.Errorf("reset, TLS without a client certificate: hint %q; want it to name ?tls_cert= and ?tls_key=", got)
	}
	if got := refusedCertHint(reset, withCert); got != "" {
		t.Errorf("reset, TLS with a client certificate: hint %q; want none", got)
	}
	if got := refusedCertHint(reset, nil); got != "" {
		t.Errorf("reset without TLS: hint %q; want none", got)
	}
	if got := refusedCertHint(errors.New("remote error: tls: certificate required"), withCert); !strings.Contains(got, "requires a client certificate") {
		t.Errorf("certificate-required alert: hint %q", got)
	}
}
