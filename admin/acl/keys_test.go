package acl_test

import (
	"reflect"
	"testing"

	"github.com/rprtunnel/rpr/internal/store"
)

// TestEveryKeyHasARole fails when package store names a key this package
// has not decided about: a new key (or channel) must get rules in
// ForServer or ForCaller, or be listed here as an operator's only, so
// that the users rpr acl prints never lag behind what rpr touches.
func TestEveryKeyHasARole(t *testing.T) {
	decided := map[string]string{
		// Keyspace
		"Prefix": "not a key", "Shard": "not a key", "Shards": "not a key", "OtherShards": "not a key",
		"ServiceOf": "not a key", "KeysOf": "SCAN patterns (operator)", "HoldsWork": "not a key",
		"IsClientKey": "not a key", "ServicePatterns": "SCAN patterns (operator)",
		"Workers": "server; caller reads", "Cancels": "server subscribes; caller publishes",
		"Handoffs": "server", "Schema": "server", "Schemas": "server", "Limits": "caller reads",
		"RateKey": "caller", "Routes": "caller reads", "RoutesChanged": "caller subscribes",
		"ShardCount": "server; caller reads", "Upstreams": "Options.Upstreams reads",
		"UpstreamsVersion": "Options.Upstreams reads", "UpstreamsApplied": "Options.Upstreams",
		// Shard
		"Requests": "server; caller writes", "Retries": "server; caller writes",
		"Responses": "caller (its own); server writes", "IsResponses": "not a key",
		"Inbox": "server; caller writes", "State": "server; caller", "Done": "server",
		"LanePatterns": "SCAN patterns (operator)", "DeadLetters": "server",
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[store.Keyspace](), reflect.TypeFor[store.Shard]()} {
		for i := range typ.NumMethod() {
			if name := typ.Method(i).Name; decided[name] == "" {
				t.Errorf("%s.%s names keys no role has been given: add rules for it in ForServer or ForCaller (or list it here as an operator's only)", typ.Name(), name)
			}
		}
	}
}
