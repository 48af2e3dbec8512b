package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"
)

// PollInterval is how often a Watcher looks for a new version of its
// table: a change applies within about that long.
const PollInterval = 500 * time.Millisecond

// Watcher keeps the current version of one upstream table for a forwarding
// process (an egress or an ingress), reporting to Redis which version it
// applied, so that `rpr upstreams set` can wait until no request goes by
// the old table.
type Watcher struct {
	store *Store
	id    string // "" for a process that does not report
	log   *slog.Logger
	table atomic.Pointer[Table]
}

// NewWatcher returns a watcher of s's table; id, when not empty, is
// the id it reports the applied version under.
func NewWatcher(s *Store, id string, log *slog.Logger) *Watcher {
	return &Watcher{store: s, id: id, log: log}
}

// Load reads the table once; call it before Run, so that the process
// starts with the table or fails clearly.
func (w *Watcher) Load(ctx context.Context) error {
	t, err := w.store.Load(ctx)
	if err != nil {
		return err
	}
	w.swap(ctx, t)
	return nil
}

// Table returns the current table.
func (w *Watcher) Table() *Table { return w.table.Load() }

// Run polls for changes every PollInterval until ctx ends, and renews the
// applied report every few seconds. When ctx ends it withdraws the
// report: a process that stopped holds no `rpr upstreams set` up.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	defer w.withdraw(ctx)
	renew := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v, err := w.store.Version(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("rpr: read the upstream table's version; forwarding by the last one read", "table", w.store.table(), "error", err)
			}
			continue
		}
		if cur := w.Table(); cur == nil || v != cur.Version {
			next, err := w.store.Load(ctx)
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("rpr: reload the upstream table; forwarding by the last one read", "table", w.store.table(), "error", err)
				}
				continue
			}
			w.swap(ctx, next)
			renew = time.Now()
		} else if time.Since(renew) >= reportEvery {
			w.report(ctx, cur.Version)
			renew = time.Now()
		}
	}
}

// swap makes t current, logs what cannot be used, and reports it applied.
func (w *Watcher) swap(ctx context.Context, t *Table) {
	old := w.table.Swap(t)
	if old == nil || old.Version != t.Version {
		w.log.Info("rpr: upstream table loaded", "table", w.store.table(), "version", t.Version, "routes", len(t.routes), "invalid", len(t.Invalid))
		for name, err := range t.Invalid {
			w.log.Error("rpr: upstream route ignored", "route", name, "error", err)
		}
	}
	w.report(ctx, t.Version)
}

func (w *Watcher) report(ctx context.Context, version int64) {
	if w.id == "" {
		return
	}
	if err := w.store.ReportApplied(ctx, w.id, version); err != nil && ctx.Err() == nil {
		w.log.Warn("rpr: report the applied upstream table", "error", err)
	}
}

// withdraw removes the report once ctx, the process's run, has ended.
func (w *Watcher) withdraw(ctx context.Context) {
	if w.id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := w.store.Withdraw(ctx, w.id); err != nil {
		w.log.Warn("rpr: withdraw the applied upstream table report; it ages out by itself", "error", err)
	}
}

// NewIngressID returns the id an ingress reports under: its host name and
// process id, with a random suffix so that a reused pid is a new id.
func NewIngressID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s%s-%d-%04x", IngressIDPrefix, host, os.Getpid(), rand.IntN(1<<16))
}
