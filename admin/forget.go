package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/rprtunnel/rpr/internal/store"
)

// ForgetResult is what Service.Forget removed and what it kept.
type ForgetResult struct {
	// Removed lists the keys deleted.
	Removed []string
	// Kept lists the keys left in place because they hold requests or
	// dead letters, which Forget removes only with Purge.
	Kept []string
}

// ForgetOptions configure Service.Forget.
type ForgetOptions struct {
	// Purge also removes request streams, retry sets and dead letters
	// that are not empty: requests no server will ever run.
	Purge bool
}

// ErrServiceLive is wrapped by Forget's error when a worker of the service
// is live: there is nothing left over to remove.
var ErrServiceLive = errors.New("the service has live workers")

// Forget removes what a service that no longer runs left in Redis, so
// that tools stop listing it at once (they stop by themselves
// wire.Retention after its last worker's beat): its worker records, its
// schemas, its shard count, routes, limits and upstream tables, and its
// empty streams; request streams, retry sets and dead-letter streams that
// still hold something stay unless opts.Purge, and clients' response
// streams stay (they expire a minute after their client). It refuses while a worker
// is live. Keys are found with SCAN over every master, so it is for
// operators, not for a hot path.
func (s *Service) Forget(ctx context.Context, opts ForgetOptions) (ForgetResult, error) {
	h, err := s.Health(ctx)
	if err != nil {
		return ForgetResult{}, err
	}
	if h.Serving() {
		var live []string
		for _, w := range h.Workers {
			if w.Live {
				live = append(live, w.ID)
			}
		}
		return ForgetResult{}, fmt.Errorf("rpr: forget %s: %w (%v): stop them first", s.name, ErrServiceLive, live)
	}
	var keys []string
	err = store.ScanEveryMaster(ctx, s.rdb, s.keys.KeysOf(s.name), func(key string) { keys = append(keys, key) })
	if err != nil {
		return ForgetResult{}, fmt.Errorf("rpr: forget %s: list its keys: %w", s.name, err)
	}
	slices.Sort(keys)
	var res ForgetResult
	for _, key := range keys {
		if s.keys.IsClientKey(key) {
			continue // a client's, maybe live; it expires without one
		}
		if !opts.Purge && s.keys.HoldsWork(key) {
			n, err := s.size(ctx, key)
			if err != nil {
				return res, fmt.Errorf("rpr: forget %s: %w", s.name, err)
			}
			if n > 0 {
				res.Kept = append(res.Kept, key)
				continue
			}
		}
		if err := s.rdb.Del(ctx, key).Err(); err != nil {
			return res, fmt.Errorf("rpr: forget %s: delete %s: %w", s.name, key, err)
		}
		res.Removed = append(res.Removed, key)
	}
	return res, nil
}

// size counts the entries of a stream or sorted set.
func (s *Service) size(ctx context.Context, key string) (int64, error) {
	typ, err := s.rdb.Type(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("type of %s: %w", key, err)
	}
	switch typ {
	case "stream":
		return s.rdb.XLen(ctx, key).Result()
	case "zset":
		return s.rdb.ZCard(ctx, key).Result()
	}
	return 0, nil
}
