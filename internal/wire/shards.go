package wire

import "hash/fnv"

// MaxShards bounds a service's shard count. Each shard costs every server
// one blocking read per lane, and every client one per shard it gets
// responses from.
const MaxShards = 64

// ShardOfKey is the shard that async requests with idempotency key key go
// to when the service has shards shards: FNV-1a (32 bit) of the key, modulo
// the count. Every client must pick the same shard for a key, so that the
// key's state is found in one place.
func ShardOfKey(key string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(shards))
}
