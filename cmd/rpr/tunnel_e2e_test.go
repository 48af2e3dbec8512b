package main

// TestTunnelTwoNetworks is the tunnel for existing services across the
// two networks rpr exists for (modelled on internal/e2e's
// TestTwoNetworks): scripts/netns-sites.sh builds siteA, siteB and a hub
// running redis-server; siteA cannot reach siteB. In siteB run an HTTP
// upstream, grpc-go's interop TestService and rpr egress; in siteA rpr
// ingress and the clients (tunnel_sitea_test.go); the routes are set with
// rpr upstreams set from the hub. The siteA clients prove that they cannot
// dial the upstreams, then get through the tunnel: sync GET and POST,
// server-sent events and a chunked download that arrive part by part, an
// async POST answered 202 and delivered, 200 requests at concurrency 8,
// and grpc-go's interop cases (unary, streaming both ways, metadata,
// status) on the ingress's HTTP listener (h2c) and its gRPC one.
//
// It needs root (network namespaces) and iproute2, and skips without them.
// It touches no namespace it did not create (the names carry the PID),
// ends every process it started by its handle, and removes the
// namespaces.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
)

// Ports inside siteB's own namespace: nothing else can hold them.
const (
	siteBHTTPPort = "18080"
	siteBGRPCPort = "18081"
)

// tunTopology is what scripts/netns-sites.sh up printed.
type tunTopology struct {
	nsA, nsB, nsHub string
	urlA, urlB      string // the hub's Redis as each site reaches it
	urlHub          string // ... and as the hub itself does
	siteBIP         string
}

func TestTunnelTwoNetworks(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("two-network test skipped: it needs root to create network namespaces (run as root, e.g. in CI via .ci/run)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("two-network test skipped: `ip` (iproute2) not found; apt-get install iproute2")
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found on PATH: run `make test` (it installs Redis via scripts/ensure-redis.sh) or `apt-get install redis-server redis-tools`", bin)
		}
	}
	t0 := time.Now()
	topo := upTunTopology(t)
	t.Logf("topology up and checked in %v", time.Since(t0).Round(time.Millisecond))

	httpAddr := net.JoinHostPort(topo.siteBIP, siteBHTTPPort)
	grpcAddr := net.JoinHostPort(topo.siteBIP, siteBGRPCPort)
	up := startTunProc(t, "site-upstream", topo.nsB, roleSiteUpstream,
		[]string{envUpstreamHTTP + "=" + httpAddr, envUpstreamGRPC + "=" + grpcAddr})
	up.waitLine("ready", 30*time.Second, func(l string) bool { return l == markerReady })

	// The upstreams answer in siteB, and siteA cannot open a connection to them.
	dial := func(ns string) tunRun {
		return runTunChild(t, ns, roleDial, []string{envDialAddrs + "=" + httpAddr + "," + grpcAddr}, 30*time.Second)
	}
	if run := dial(topo.nsB); run.code != 0 {
		t.Fatalf("positive control: %s cannot reach its own upstreams:\n%s", topo.nsB, run.out)
	}
	if run := dial(topo.nsA); run.code != 2 {
		t.Fatalf("%s reached an upstream in %s (exit %d): the sites are not isolated:\n%s", topo.nsA, topo.nsB, run.code, run.out)
	} else {
		t.Logf("ok: %s cannot reach the upstreams:\n%s", topo.nsA, strings.TrimSpace(run.out))
	}

	startEgressProc(t, topo.nsB, topo.urlB, "siteB-egress")
	tunWait(t, 30*time.Second, "the egress to beat", func() bool {
		return runRPRChild(t, topo.nsHub, 20*time.Second, "health", upstream.HTTPService, "--redis", topo.urlHub).code == 0
	})
	for _, r := range [][]string{
		{"e2e", "--path", "/e2e", "--upstream", "http://" + httpAddr},
		{"e2e-dl", "--path", "/e2e-dl", "--upstream", "http://" + httpAddr, "--mode", "stream"},
		{"e2e-jobs", "--path", "/e2e/jobs", "--upstream", "http://" + httpAddr, "--mode", "async"},
		{"interop", "--path", "/grpc.testing.TestService", "--upstream", "grpc://" + grpcAddr},
	} {
		run := runRPRChild(t, topo.nsHub, 30*time.Second, append([]string{"upstreams", "set", r[0], "--redis", topo.urlHub}, r[1:]...)...)
		if run.code != 0 || !strings.Contains(run.out, "applied by 1 egress") {
			t.Fatalf("rpr upstreams set %s in %s: exit %d; want it applied by the egress:\n%s", r[0], topo.nsHub, run.code, run.out)
		}
	}
	_, ingressHTTP, ingressGRPC := startIngressProc(t, topo.nsA, topo.urlA, "127.0.0.1", true)

	client := func(t *testing.T, steps string) map[string]stepResult {
		t.Helper()
		run := runTunChild(t, topo.nsA, roleSiteClient, []string{
			envIngressHTTP + "=" + ingressHTTP, envIngressGRPC + "=" + ingressGRPC,
			envForbidden + "=" + httpAddr + "," + grpcAddr, envSteps + "=" + steps,
		}, 3*time.Minute)
		if run.code != 0 {
			t.Fatalf("the %s client in %s: exit %d after %v:\n%s", steps, topo.nsA, run.code, run.elapsed.Round(time.Millisecond), run.out)
		}
		results := map[string]stepResult{}
		for _, line := range strings.Split(run.out, "\n") {
			rest, ok := strings.CutPrefix(line, "ok ")
			if !ok {
				continue
			}
			name, js, _ := strings.Cut(rest, " ")
			var r stepResult
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				t.Fatalf("step %s: %v: %q", name, err, js)
			}
			results[name] = r
			t.Logf("ok %s %s", name, r.Detail)
		}
		t.Logf("the %s client took %v", steps, run.elapsed.Round(time.Millisecond))
		return results
	}

	t.Run("http", func(t *testing.T) {
		got := client(t, "http")
		for _, step := range []string{"isolation", "get", "post", "sse", "download", "async", "load"} {
			if _, ok := got[step]; !ok {
				t.Fatalf("no result for step %s", step)
			}
		}
		// The upstream prints a request's line as it answers: wait for all.
		var hits []tunHit
		tunWait(t, 10*time.Second, "the upstream's lines for every request", func() bool {
			hits = siteHits(t, up)
			seen := map[string]bool{}
			for _, h := range hits {
				seen[h.Tag] = true
			}
			for _, tag := range []string{"get", "post", "sse-1", "dl-1", "async"} {
				if !seen[tag] {
					return false
				}
			}
			for tag := range got["load"].Tags {
				if !seen[tag] {
					return false
				}
			}
			return true
		})
		once := func(what string, keep func(tunHit) bool) tunHit {
			t.Helper()
			var found []tunHit
			for _, h := range hits {
				if keep(h) {
					found = append(found, h)
				}
			}
			if len(found) != 1 {
				t.Errorf("%s: the upstream got it %d times, want once: %+v", what, len(found), found)
				return tunHit{}
			}
			return found[0]
		}
		for tag, step := range map[string]string{"get": "get", "post": "post", "sse-1": "sse", "dl-1": "download", "async": "async"} {
			h := once(step, func(h tunHit) bool { return h.Tag == tag })
			if r := got[step]; h.RequestID != r.RequestID || h.Status != 200 {
				t.Errorf("%s: the upstream saw request %q and answered %d; the client got request id %q", step, h.RequestID, h.Status, r.RequestID)
			}
		}
		if h := once("the POST body", func(h tunHit) bool { return h.Tag == "post" }); h.BodyLen != got["post"].BodyLen || h.BodySHA != got["post"].BodySHA {
			t.Errorf("the upstream got %d bytes (sha256 %s), the client sent %d (%s)", h.BodyLen, h.BodySHA, got["post"].BodyLen, got["post"].BodySHA)
		}
		if h := once("the async delivery", func(h tunHit) bool { return h.Key == "e2e-job-1" }); h.Path != "/e2e/jobs/1" {
			t.Errorf("the async delivery went to %s", h.Path)
		}
		load := got["load"].Tags
		if len(load) != loadRequests {
			t.Errorf("load: %d requests answered, want %d", len(load), loadRequests)
		}
		for tag, id := range load {
			if h := once(tag, func(h tunHit) bool { return h.Tag == tag }); h.RequestID != id {
				t.Errorf("%s: the upstream saw request %q, the client got %q", tag, h.RequestID, id)
			}
		}
	})

	t.Run("grpc", func(t *testing.T) {
		got := client(t, "grpc")
		for _, step := range []string{"grpc-h2c", "grpc-grpc-listen"} {
			if _, ok := got[step]; !ok {
				t.Errorf("no result for step %s", step)
			}
		}
	})
}

// siteHits reads the hit lines the siteB upstream printed so far.
func siteHits(t *testing.T, up *tunProc) []tunHit {
	t.Helper()
	var hits []tunHit
	for _, line := range up.out.Lines() {
		js, ok := strings.CutPrefix(line, hitPrefix)
		if !ok {
			continue
		}
		var h tunHit
		if err := json.Unmarshal([]byte(js), &h); err != nil {
			t.Fatalf("site-upstream printed %q: %v", line, err)
		}
		hits = append(hits, h)
	}
	return hits
}

// upTunTopology runs scripts/netns-sites.sh up with namespace names of
// this process' own, registers its down, and runs its check.
func upTunTopology(t *testing.T) *tunTopology {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "netns-sites.sh"))
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	names := []string{fmt.Sprintf("rprTA%d", pid), fmt.Sprintf("rprTB%d", pid), fmt.Sprintf("rprTH%d", pid)}
	env := append(os.Environ(), "RPR_STATE_DIR="+filepath.Join(t.TempDir(), "netns"),
		"NS_A="+names[0], "NS_B="+names[1], "NS_HUB="+names[2])
	run := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, script, args...)
		cmd.Env = env
		cmd.WaitDelay = 5 * time.Second
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	// Registered before up, so a half-built topology is torn down too (down
	// deletes only the namespaces listed in our own state dir), and first,
	// so that it runs after the cleanups that end our processes.
	t.Cleanup(func() {
		if out, err := run(90*time.Second, "down"); err != nil {
			t.Errorf("netns-sites.sh down: %v\n%s", err, out)
		}
		for _, name := range names {
			if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
				t.Errorf("namespace %s still exists after down", name)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, "up")
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("netns-sites.sh up: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	kv := map[string]string{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			kv[k] = v
		}
	}
	topo := &tunTopology{nsA: kv["NS_A"], nsB: kv["NS_B"], nsHub: kv["NS_HUB"], urlA: kv["REDIS_URL_SITE_A"], urlB: kv["REDIS_URL_SITE_B"], siteBIP: kv["SITE_B_IP"]}
	if kv["REDIS_PORT"] != "" {
		topo.urlHub = "redis://127.0.0.1:" + kv["REDIS_PORT"] + "/0"
	}
	for k, v := range map[string]string{"NS_A": topo.nsA, "NS_B": topo.nsB, "NS_HUB": topo.nsHub, "REDIS_URL_SITE_A": topo.urlA,
		"REDIS_URL_SITE_B": topo.urlB, "SITE_B_IP": topo.siteBIP, "REDIS_PORT": topo.urlHub} {
		if v == "" {
			t.Fatalf("netns-sites.sh up did not print %s; it printed:\n%s", k, stdout.String())
		}
	}
	// The script's own isolation check (siteA reaches neither siteB nor the
	// hub's siteB side, the hub does not forward, both sites reach Redis).
	if out, err := run(time.Minute, "check"); err != nil {
		t.Fatalf("netns-sites.sh check: %v\n%s", err, out)
	}
	return topo
}
