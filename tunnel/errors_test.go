package tunnel_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/tunnel"
)

// TestWithDetailsKeepsAnys: an *anypb.Any is attached as it is (a proxy's
// detail of a type it does not link, under any type URL prefix); other
// messages are wrapped.
func TestWithDetailsKeepsAnys(t *testing.T) {
	foreign := &anypb.Any{TypeUrl: "example.com/acme.v1.Unknown", Value: []byte{8, 1}}
	e, err := tunnel.Errorf(tunnel.Aborted, "x").WithDetails(foreign, wrapperspb.String("w"))
	if err != nil {
		t.Fatal(err)
	}
	d := e.Details()
	if len(d) != 2 || !proto.Equal(d[0], foreign) || d[1].GetTypeUrl() != "type.googleapis.com/google.protobuf.StringValue" {
		t.Errorf("details = %v", d)
	}
}
