package admin

import (
	"testing"

	"github.com/rprtunnel/rpr/internal/wire"
)

// TestLimitConstantsAreTheProtocols: the algorithm names and the log's cap
// this package documents are the ones the protocol stores and enforces.
func TestLimitConstantsAreTheProtocols(t *testing.T) {
	if LimitLog != wire.LimitLog || LimitGCRA != wire.LimitGCRA || MaxLogLimit != wire.MaxLogLimit {
		t.Errorf("admin's LimitLog %q, LimitGCRA %q, MaxLogLimit %d; the protocol's %q, %q, %d",
			LimitLog, LimitGCRA, MaxLogLimit, wire.LimitLog, wire.LimitGCRA, wire.MaxLogLimit)
	}
}
