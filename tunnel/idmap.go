package tunnel

import "sync"

// idMapShards is how many shards an idMap has: a power of two.
const idMapShards = 16

// idMap is a map keyed by request id, in shards chosen by the id's last
// character (one of its random ones, see newRequestID; any string works),
// each with a lock of its own: the calls of a busy client, or the
// requests of a busy server, each touch one shard, instead of all
// queueing on one mutex, which at 128 concurrent calls was most of the
// lock waits of a call (waking a goroutine parked on a lock costs a
// futex call).
type idMap[V any] struct {
	shards [idMapShards]idMapShard[V]
}

type idMapShard[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

func (m *idMap[V]) shard(id string) *idMapShard[V] {
	if id == "" {
		return &m.shards[0]
	}
	return &m.shards[id[len(id)-1]&(idMapShards-1)]
}

// put sets id's value.
func (m *idMap[V]) put(id string, v V) {
	s := m.shard(id)
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]V{}
	}
	s.m[id] = v
	s.mu.Unlock()
}

// get returns id's value.
func (m *idMap[V]) get(id string) (V, bool) {
	s := m.shard(id)
	s.mu.Lock()
	v, ok := s.m[id]
	s.mu.Unlock()
	return v, ok
}

// with calls fn with id's value, if it has one, under its shard's lock:
// fn must not use m.
func (m *idMap[V]) with(id string, fn func(v V)) {
	s := m.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.m[id]; ok {
		fn(v)
	}
}

// take returns id's value and removes it.
func (m *idMap[V]) take(id string) (V, bool) {
	s := m.shard(id)
	s.mu.Lock()
	v, ok := s.m[id]
	delete(s.m, id)
	s.mu.Unlock()
	return v, ok
}

// remove removes id.
func (m *idMap[V]) remove(id string) {
	s := m.shard(id)
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

// each calls fn with every entry, one shard at a time, each under its
// lock: fn must not use m.
func (m *idMap[V]) each(fn func(id string, v V)) {
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for id, v := range s.m {
			fn(id, v)
		}
		s.mu.Unlock()
	}
}

// takeAll removes every entry and returns them.
func (m *idMap[V]) takeAll() map[string]V {
	out := map[string]V{}
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for id, v := range s.m {
			out[id] = v
		}
		s.m = nil
		s.mu.Unlock()
	}
	return out
}
