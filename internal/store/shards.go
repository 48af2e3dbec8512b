package store

// raiseShardsScript records a service's shard count, never lowering it:
// servers and clients configured for more shards raise it as they start,
// so that no one sends to a shard nobody reads (lowering is an operator's
// action, which first checks that nothing would be stranded).
//
//	KEYS[1] shard count key   ARGV[1] the caller's shard count
//
// Returns the count in force afterwards (absent counts as 1).
var raiseShardsScript = newScript("raise_shards", `
local cur = tonumber(redis.call('GET', KEYS[1]) or '1') or 1
local n = tonumber(ARGV[1])
if n > cur then
  redis.call('SET', KEYS[1], n)
  return n
end
return cur
`)

// RaiseShards records that a service has at least n shards.
type RaiseShards struct {
	Call
}

// NewRaiseShards raises the count at key (Keyspace.ShardCount) to n.
func NewRaiseShards(key string, n int) *RaiseShards {
	return &RaiseShards{Call: Call{script: raiseShardsScript, keys: []string{key}, args: []any{n}}}
}

// Result returns the count in force.
func (r *RaiseShards) Result() (int, error) {
	if _, err := r.reply(); err != nil {
		return 0, err
	}
	n, err := r.cmd.Int()
	return n, err
}
