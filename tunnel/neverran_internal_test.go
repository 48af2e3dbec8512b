package tunnel

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/store"
)

// TestNeverRan: only failures that prove a write had no effect make a
// call NotExecuted; a broken connection after writing does not.
func TestNeverRan(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}, true},
		{fmt.Errorf("send: %w", redis.ErrPoolTimeout), true},
		{&store.ScriptError{Script: "enqueue", Code: "OOM"}, true},
		{&store.ScriptError{Script: "enqueue", Code: "WRONGTYPE", Started: true}, false},
		{io.EOF, false},
		{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, false},
		{nil, false},
	}
	for _, c := range cases {
		if got := neverRan(c.err); got != c.want {
			t.Errorf("neverRan(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
