package tunnel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/rprtunnel/rpr/tunnel"
)

func TestCodeText(t *testing.T) {
	b, err := json.Marshal(map[string]tunnel.Code{"code": tunnel.NotFound})
	if err != nil || string(b) != `{"code":"NOT_FOUND"}` {
		t.Fatalf("json.Marshal = %s, %v; want the code's name", b, err)
	}
	var back map[string]tunnel.Code
	if err := json.Unmarshal(b, &back); err != nil || back["code"] != tunnel.NotFound {
		t.Fatalf("json.Unmarshal = %v, %v; want NOT_FOUND", back, err)
	}
	var c tunnel.Code
	if err := c.UnmarshalText([]byte("14")); err != nil || c != tunnel.Unavailable {
		t.Errorf("UnmarshalText(14) = %v, %v; want UNAVAILABLE", c, err)
	}
	if err := c.UnmarshalText([]byte("NOPE")); err == nil {
		t.Error("UnmarshalText(NOPE) succeeded")
	}
}

func TestAsError(t *testing.T) {
	if e, ok := tunnel.AsError(nil); e != nil || ok {
		t.Errorf("AsError(nil) = %v, %t; want nil, false", e, ok)
	}
	status := tunnel.Errorf(tunnel.NotFound, "order %q not found", "o-1")
	if e, ok := tunnel.AsError(fmt.Errorf("lookup: %w", status)); e != status || !ok {
		t.Errorf("AsError(wrapped *Error) = %v, %t; want the *Error, true", e, ok)
	}
	plain := errors.New("disk full")
	e, ok := tunnel.AsError(plain)
	if ok || e.Code() != tunnel.Unknown || e.Message() != "disk full" || !errors.Is(e, plain) {
		t.Errorf("AsError(plain) = %v, %t; want UNKNOWN carrying the error, false", e, ok)
	}
	if e, ok := tunnel.AsError(context.DeadlineExceeded); ok || e.Code() != tunnel.DeadlineExceeded {
		t.Errorf("AsError(context.DeadlineExceeded) = %v, %t; want DEADLINE_EXCEEDED, false", e, ok)
	}
}
