package main

import (
	"testing"

	"github.com/rprtunnel/rpr/tunnel"
)

// TestVersionIsTheRuntimes: protoc-gen-rpr --version and the header of
// the files it writes show the runtime's version, tunnel.Version (the
// plugin reads it from internal/version, without importing tunnel).
func TestVersionIsTheRuntimes(t *testing.T) {
	if version != tunnel.Version {
		t.Errorf("protoc-gen-rpr version %q, tunnel.Version %q: want one version", version, tunnel.Version)
	}
}
