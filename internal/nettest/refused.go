//go:build unix

package nettest

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr returns a loopback TCP address ("127.0.0.1:PORT") that
// refuses every connection until tb ends: its port is held by a socket
// bound to it that never listens, so nothing else can listen there (the
// socket is bound without SO_REUSEADDR, which a second bind would need)
// and a connection to it is answered with a reset.
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("nettest: socket: %v", err)
	}
	syscall.CloseOnExec(fd) // children of the test must not hold the port
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("nettest: bind 127.0.0.1:0: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatalf("nettest: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		tb.Fatalf("nettest: getsockname gave %T, want an IPv4 address", sa)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port))
}
