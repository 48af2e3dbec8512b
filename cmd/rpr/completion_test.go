package main

import (
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestCompletionOfServicesAndMethods: the shell completion of the commands
// that take a service or a method offers the services Redis knows, then
// the methods of the one typed, from its published schema.
func TestCompletionOfServicesAndMethods(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "completion-worker")
	url := rs.URL()
	for _, cmd := range []string{"call", "describe", "bench", "routes test"} {
		words := append([]string{"__complete"}, strings.Fields(cmd)...)
		res := runCLI(t, "", append(words, "--redis", url, "")...)
		if res.code != 0 || !strings.Contains(res.stdout, greeterService+"/\n") {
			t.Errorf("rpr %s <TAB>: want %s/; %v", cmd, greeterService, res)
		}
		res = runCLI(t, "", append(words, "--redis", url, greeterService+"/")...)
		if res.code != 0 || !strings.Contains(res.stdout, greeterService+"/SayHello\n") || !strings.Contains(res.stdout, greeterService+"/SlowHello\n") {
			t.Errorf("rpr %s %s/<TAB>: want its methods; %v", cmd, greeterService, res)
		}
	}
	for _, cmd := range []string{"ls", "stats", "top", "health", "limits ls", "routes ls", "dlq ls", "shards get", "forget"} {
		words := append([]string{"__complete"}, strings.Fields(cmd)...)
		res := runCLI(t, "", append(words, "--redis", url, "")...)
		if res.code != 0 || !strings.Contains(res.stdout, greeterService+"\n") {
			t.Errorf("rpr %s <TAB>: want %s; %v", cmd, greeterService, res)
		}
	}
}

// TestVersion: rpr version and rpr --version print tunnel.Version, the
// version protoc-gen-rpr --version prints too.
func TestVersion(t *testing.T) {
	if res := runCLI(t, "", "version"); res.code != 0 || !strings.HasPrefix(res.stdout, "rpr "+tunnel.Version+" (go") {
		t.Errorf("rpr version: %v", res)
	}
	if res := runCLI(t, "", "--version"); res.code != 0 || res.stdout != "rpr "+tunnel.Version+"\n" {
		t.Errorf("rpr --version: %v", res)
	}
}
