package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
)

// TestACLTunnelRolesRunUnderPrintedRules runs rpr egress as the server
// user and rpr ingress as the caller user `rpr acl` prints for the
// tunnel's services, as child processes: a sync request is answered, an
// async one reaches the upstream, and Redis refused nothing.
func TestACLTunnelRolesRunUnderPrintedRules(t *testing.T) {
	w := newTunWorld(t)
	ctx := context.Background()
	services := []string{upstream.HTTPService, upstream.GRPCService}
	createACLUser(t, w.rdb, append([]string{"server"}, append(services, "--user", "rpr-egress", "--password-placeholder", "egress-pw")...)...)
	createACLUser(t, w.rdb, append([]string{"caller"}, append(services, "--user", "rpr-ingress", "--password-placeholder", "ingress-pw")...)...)
	if err := w.rdb.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	rec, up := startUpstream(t, "upstream", func(rw http.ResponseWriter, _ *http.Request, hit *tunHit, _ []byte) int {
		return upReply(rw, hit, http.StatusOK)
	})
	egress := startEgressProc(t, "", "redis://rpr-egress:egress-pw@"+w.redis.Addr()+"/0", "e1")
	w.waitLive("e1")
	w.setRoute("sync", "--path", "/sync", "--upstream", up.URL)
	w.setRoute("async", "--path", "/async", "--upstream", up.URL, "--mode", "async")
	var addr string
	w.ingress, addr, _ = startIngressProc(t, "", "redis://rpr-ingress:ingress-pw@"+w.redis.Addr()+"/0", "127.0.0.1", false)
	w.base = "http://" + addr

	if a := w.send("GET", "/sync/x", nil); a.status != http.StatusOK {
		t.Fatalf("GET /sync/x: %v", a)
	}
	w.post("/async/y", "order-1", []byte("y"))
	tunWait(t, 20*time.Second, "the async request to reach the upstream", func() bool { return len(rec.byKey("order-1")) > 0 })

	denials, err := w.rdb.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(denials) > 0 {
		t.Fatalf("Redis refused %d commands rpr sent: %v\ningress:\n%s", len(denials), denials, w.ingress.out)
	}
	for _, p := range []*tunProc{w.ingress, egress} {
		if lines := logLines(p, "NOPERM"); len(lines) > 0 {
			t.Errorf("%s logged refusals:\n%s", p.name, strings.Join(lines, "\n"))
		}
	}
}
