package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestACLCommand: `rpr acl` prints one ACL SETUSER line per run (or its
// JSON), needs no Redis, and refuses bad input with exit status 2.
func TestACLCommand(t *testing.T) {
	t.Setenv(envRedisURL, "redis://127.0.0.1:1/0") // never dialled
	res := runCLI(t, "", "acl", "caller", "acme.orders.v1.Orders", "--prefix", "staging:v1:", "--client-id", "shop-")
	if res.code != 0 || !strings.HasPrefix(res.stdout, "ACL SETUSER rpr-caller-acme.orders.v1.Orders reset ") ||
		strings.Count(res.stdout, "\n") != 1 || !strings.Contains(res.stdout, "~staging:v1:{acme.orders.v1.Orders}:resp:shop-*") {
		t.Fatalf("rpr acl caller: %v", res)
	}
	res = runCLI(t, "", "acl", "server", "acme.orders.v1.Orders", "-o", "json")
	var doc aclUserJSON
	if err := json.Unmarshal([]byte(res.stdout), &doc); err != nil || res.code != 0 {
		t.Fatalf("rpr acl server -o json: %v (%v)", res, err)
	}
	if doc.User != "rpr-server-acme.orders.v1.Orders" || doc.Role != "server" || doc.Prefix != "rpr:v1:" ||
		len(doc.Rules) == 0 || !strings.Contains(doc.Command, ">CHANGE-ME") {
		t.Errorf("json = %+v", doc)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"acl", "caller"}, "usage: rpr acl caller SERVICE..."},
		{[]string{"acl", "server", "acme.orders.v1.Orders/ShipOrder"}, "full proto service name"},
		{[]string{"acl", "caller", "a.B", "c.D"}, "--user"},
		{[]string{"acl", "operator", "a.B"}, "usage: rpr acl operator"},
		{[]string{"acl", "nope"}, `unknown command "nope"`},
		{[]string{"acl", "server", "a.B", "-o", "yaml"}, "-o json"},
		{[]string{"acl", "server", "a.B", "--prefix", "rpr v1"}, "prefix"},
	} {
		res := runCLI(t, "", tc.args...)
		if res.code != exitBadInput || res.stdout != "" || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("rpr %v: %v; want exit 2 and %q", tc.args, res, tc.want)
		}
	}
}
