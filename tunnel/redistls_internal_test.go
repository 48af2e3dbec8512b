package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
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
