package admin_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/internal/wire"
	"github.com/rprtunnel/rpr/tunnel"
)

// TestRegistryStaysTrue: each worker's record names its schema version and
// methods; a schema Redis loses comes back within a beat or two; the
// registry keys expire after wire.Retention; Forget refuses a live
// service and removes a dead one, keeping what holds requests.
func TestRegistryStaysTrue(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	if err := registerRegistryFile(); err != nil {
		t.Fatal(err)
	}
	server, err := tunnel.NewServer(rdb, tunnel.ServerOptions{WorkerID: "reg-1", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	server.RegisterService(registryDesc(), struct{}{})
	stop := serve(t, server, "registry")
	svc := handle(rdb).Service(registryService)
	var h admin.Health
	waitFor(t, "the worker live", func() bool {
		h, err = svc.Health(ctx)
		return err == nil && h.Serving()
	})
	w := h.Workers[0]
	if !slices.Equal(w.Methods, []string{"Echo"}) || w.Schema == "" {
		t.Fatalf("worker record: methods %q, schema %q", w.Methods, w.Schema)
	}
	if _, err := svc.SchemaVersion(ctx, w.Schema); err != nil {
		t.Fatalf("SchemaVersion(%s): %v", w.Schema, err)
	}
	for _, key := range []string{"workers", "schemas", "schema"} {
		ttl := rdb.PTTL(ctx, "rpr:v1:{"+registryService+"}:"+key).Val()
		if ttl <= wire.Retention-time.Minute || ttl > wire.Retention {
			t.Errorf("%s TTL %v, want about %v", key, ttl, wire.Retention)
		}
	}

	// Redis loses the schema (a restart without persistence): it is back
	// within a couple of beats.
	rdb.Del(ctx, "rpr:v1:{"+registryService+"}:schemas", "rpr:v1:{"+registryService+"}:schema")
	waitFor(t, "the schema republished", func() bool {
		_, err := svc.SchemaFiles(ctx)
		return err == nil && rdb.HExists(ctx, "rpr:v1:{"+registryService+"}:schemas", w.Schema).Val()
	})

	if _, err := svc.Forget(ctx, admin.ForgetOptions{}); !errors.Is(err, admin.ErrServiceLive) {
		t.Errorf("Forget of a live service: %v, want ErrServiceLive", err)
	}
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "rpr:v1:{" + registryService + "}:dlq", Values: []any{"e", "a letter"}})
	stop()
	res, err := svc.Forget(ctx, admin.ForgetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Kept, "rpr:v1:{"+registryService+"}:dlq") || !slices.Contains(res.Removed, "rpr:v1:{"+registryService+"}:schemas") {
		t.Errorf("Forget: %+v; want the schemas removed and the dead letters kept", res)
	}
	names, _ := handle(rdb).Services(ctx)
	if slices.Contains(names, registryService) {
		t.Errorf("Services still lists %s after Forget: %q", registryService, names)
	}
	if res, err := svc.Forget(ctx, admin.ForgetOptions{Purge: true}); err != nil || !slices.Equal(res.Removed, []string{"rpr:v1:{" + registryService + "}:dlq"}) {
		t.Errorf("Forget --purge: %+v, %v", res, err)
	}
}
