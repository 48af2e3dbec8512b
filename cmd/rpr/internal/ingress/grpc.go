package ingress

import (
	"log/slog"
	"net"
	"net/http"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
	"github.com/rprtunnel/rpr/tunnel"
)

// grpcHandler takes gRPC calls for the tunnel (being written).
type grpcHandler struct{}

func newGRPCHandler(*tunnel.Client, func() *upstream.Table, *slog.Logger) *grpcHandler {
	return &grpcHandler{}
}

func (h *grpcHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "gRPC passthrough is being written", http.StatusNotImplemented)
}

// Serve serves gRPC alone on l until Stop.
func (h *grpcHandler) Serve(net.Listener) error { return nil }

// Stop ends Serve and the calls in flight.
func (h *grpcHandler) Stop() {}
