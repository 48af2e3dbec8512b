//go:build unix

package nettest

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestRefusedAddr: a connection to the address is refused, and nobody can
// listen there, not even on the port by name.
func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	if c, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("dial %s = %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); !errors.Is(err, syscall.EADDRINUSE) {
		if l != nil {
			_ = l.Close()
		}
		t.Fatalf("listen on %s = %v, want address in use", addr, err)
	}
}
