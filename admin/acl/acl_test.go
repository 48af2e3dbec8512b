package acl_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/rprtunnel/rpr/admin/acl"
)

const orders = "acme.orders.v1.Orders"

// selectorWith returns the caller's selectors that name pattern.
func selectorsWith(u acl.User, pattern string) []string {
	var out []string
	for _, r := range u.Rules {
		if strings.HasPrefix(r, "(") && slices.Contains(strings.Fields(strings.Trim(r, "()")), pattern) {
			out = append(out, r)
		}
	}
	return out
}

func TestCallerNeverReadsRequestStreams(t *testing.T) {
	u, err := acl.ForCaller([]string{orders}, acl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "rpr-caller-"+orders || u.Role != acl.Caller || u.Prefix != "rpr:v1:" {
		t.Fatalf("user %q role %q prefix %q", u.Name, u.Role, u.Prefix)
	}
	if !slices.Equal(u.Rules[:4], []string{"reset", "resetchannels", "on", ">" + acl.DefaultPassword}) {
		t.Fatalf("rules start %v, want reset, resetchannels, on, the password", u.Rules[:4])
	}
	for _, shard := range []string{"{" + orders + "}", "{" + orders + "#*}"} {
		for _, perm := range []string{"~", "%R~", "%W~"} {
			for _, s := range selectorsWith(u, perm+"rpr:v1:"+shard+":req") {
				for _, read := range []string{"+xrange", "+xrevrange", "+xread", "+xreadgroup", "+xclaim", "+xautoclaim", "+xinfo", "+@all", "+@read"} {
					if strings.Contains(s, read+" ") || strings.HasSuffix(s, read+")") {
						t.Errorf("selector %s lets the caller read the request stream (%s)", s, read)
					}
				}
			}
		}
	}
	if got := selectorsWith(u, "%R~rpr:v1:{"+orders+"}:req"); len(got) != 1 || !strings.HasSuffix(got[0], " +xpending)") {
		t.Errorf("read permission on the request stream: %v, want one selector allowing XPENDING alone", got)
	}
	for _, key := range []string{"workers", "routes", "limits", "shards"} {
		if got := selectorsWith(u, "~rpr:v1:{"+orders+"}:"+key); len(got) != 0 {
			t.Errorf("caller may write %s: %v", key, got)
		}
	}
	if strings.Contains(u.Command(), "+@all") || strings.Contains(u.Command(), "+info ") {
		t.Errorf("caller gets +@all or the whole of INFO: %s", u.Command())
	}
	for _, section := range []string{"+info|server ", "+info|replication "} {
		if !strings.Contains(u.Command(), section) {
			t.Errorf("caller lacks %s(its failover check needs it): %s", section, u.Command())
		}
	}
}

func TestCallerClientIDNarrowsResponseStreams(t *testing.T) {
	u, err := acl.ForCaller([]string{orders}, acl.Options{ClientID: "shop-", Prefix: "staging:v1:"})
	if err != nil {
		t.Fatal(err)
	}
	if got := selectorsWith(u, "~staging:v1:{"+orders+"}:resp:shop-*"); len(got) != 1 {
		t.Fatalf("response streams of clients shop-*: %v in %s", got, u.Command())
	}
	if strings.Contains(u.Command(), "rpr:v1:") || strings.Contains(u.Command(), ":resp:*") {
		t.Errorf("rules outside the prefix or other clients' responses: %s", u.Command())
	}
}

func TestServerCannotChangeRoutesOrLimits(t *testing.T) {
	u, err := acl.ForServer([]string{orders, "acme.billing.v1.Billing"}, acl.Options{User: "rpr-warehouse", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := u.Command()
	for _, forbidden := range []string{":routes", ":limits", ":rl:", "+@all"} {
		if strings.Contains(cmd, forbidden) {
			t.Errorf("server rules name %s: %s", forbidden, cmd)
		}
	}
	for _, svc := range u.Services {
		for _, want := range []string{"~rpr:v1:{" + svc + "}:req", "~rpr:v1:{" + svc + "#*}:workers", "&rpr:v1:{" + svc + "}:cancel"} {
			if !slices.Contains(u.Rules, want) {
				t.Errorf("server rules lack %s", want)
			}
		}
		if got := selectorsWith(u, "%W~rpr:v1:{"+svc+"}:resp:*"); len(got) != 1 || strings.Contains(got[0], "xrange") {
			t.Errorf("response streams: %v, want write permission only", got)
		}
	}
	if !strings.HasPrefix(cmd, "ACL SETUSER rpr-warehouse reset resetchannels on >pw ") {
		t.Errorf("command starts %q", cmd[:60])
	}
	if args := u.Args(); len(args) != 3+len(u.Rules) || args[2] != "rpr-warehouse" {
		t.Errorf("Args = %v", args[:3])
	}
}

func TestOperatorCoversThePrefix(t *testing.T) {
	u, err := acl.ForOperator(acl.Options{Prefix: "staging:v1:"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"~staging:v1:*", "&staging:v1:*", "+@all", "-@dangerous"} {
		if !slices.Contains(u.Rules, want) {
			t.Errorf("operator rules lack %s: %v", want, u.Rules)
		}
	}
	if u.Name != "rpr-operator" {
		t.Errorf("name %q", u.Name)
	}
}

func TestBadInputIsRefusedWithTheFix(t *testing.T) {
	for _, tc := range []struct {
		name     string
		services []string
		opts     acl.Options
		want     string
	}{
		{"no service", nil, acl.Options{}, "name at least one service"},
		{"method", []string{orders + "/ShipOrder"}, acl.Options{}, "full proto service name"},
		{"braces", []string{"{acme}"}, acl.Options{}, "full proto service name"},
		{"glob prefix", []string{orders}, acl.Options{Prefix: "rpr:*:"}, `prefix "rpr:*:" holds '*'`},
		{"space in client id", []string{orders}, acl.Options{ClientID: "shop 1"}, "client id prefix"},
		{"quote in password", []string{orders}, acl.Options{Password: `a"b`}, "password"},
		{"two services, no user", []string{orders, "acme.billing.v1.Billing"}, acl.Options{}, "--user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := acl.ForCaller(tc.services, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestUpstreamsAreReadOnly(t *testing.T) {
	const svc = "rpr.tunnel.v1.HTTP"
	for _, build := range []func([]string, acl.Options) (acl.User, error){acl.ForCaller, acl.ForServer} {
		u, err := build([]string{svc}, acl.Options{Upstreams: true})
		if err != nil {
			t.Fatal(err)
		}
		table := "%R~rpr:v1:{" + svc + "}:upstreams"
		if got := selectorsWith(u, table); len(got) != 1 || strings.Contains(got[0], "hset") {
			t.Errorf("%s: upstream table selectors %v, want one, read only", u.Role, got)
		}
		if got := selectorsWith(u, "~rpr:v1:{"+svc+"}:upstreams:applied"); len(got) != 1 {
			t.Errorf("%s: applied report selectors %v", u.Role, got)
		}
		if plain, _ := build([]string{svc}, acl.Options{}); strings.Contains(plain.Command(), ":upstreams") {
			t.Errorf("%s without Upstreams names the tables", u.Role)
		}
	}
}
