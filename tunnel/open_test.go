package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/nettest"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

// openCtx bounds one Open test, topology start-up included.
func openCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustOpen opens rawURL, fails t on error and closes the client at the end.
func mustOpen(t *testing.T, ctx context.Context, rawURL string) redis.UniversalClient {
	t.Helper()
	rdb, err := tunnel.Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("Open(%q): %v", rawURL, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// retrySet sets key until it succeeds or ctx ends (a failover in progress)
// and returns how long that took.
func retrySet(t *testing.T, ctx context.Context, rdb redis.UniversalClient, key, value string) time.Duration {
	t.Helper()
	begin := time.Now()
	for {
		err := rdb.Set(ctx, key, value, 0).Err()
		if err == nil {
			return time.Since(begin)
		}
		if ctx.Err() != nil {
			t.Fatalf("SET %s never succeeded: %v", key, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestOpenStandalone(t *testing.T) {
	t.Parallel()
	ctx := openCtx(t)
	srv := redistest.Start(t)

	rdb := mustOpen(t, ctx, srv.URL())
	c, ok := rdb.(*redis.Client)
	if !ok {
		t.Fatalf("Open(%s) = %T, want *redis.Client", srv.URL(), rdb)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	// A database other than 0 is fine on a standalone server.
	rdb3 := mustOpen(t, ctx, "redis://"+srv.Addr()+"/3?dial_timeout=2s")
	if db := rdb3.(*redis.Client).Options().DB; db != 3 {
		t.Fatalf("db = %d, want 3", db)
	}
	if err := rdb3.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k in db 3 = %v, want redis.Nil (it was set in db 0)", err)
	}
}

func TestOpenCluster(t *testing.T) {
	t.Parallel()
	ctx := openCtx(t)
	cl := redistest.StartCluster(t)
	addrs := cl.Addrs()
	// One key on each master.
	keys := []string{redistest.KeyInSlot(100), redistest.KeyInSlot(8000), redistest.KeyInSlot(16000)}

	checkCluster := func(t *testing.T, rawURL string) *redis.ClusterClient {
		t.Helper()
		rdb := mustOpen(t, ctx, rawURL)
		cc, ok := rdb.(*redis.ClusterClient)
		if !ok {
			t.Fatalf("Open(%s) = %T, want *redis.ClusterClient", rawURL, rdb)
		}
		for _, k := range keys {
			v := rawURL + "|" + k
			if err := cc.Set(ctx, k, v, 0).Err(); err != nil {
				t.Fatalf("SET %s (slot %d): %v", k, redistest.Slot(k), err)
			}
			if got, err := cc.Get(ctx, k).Result(); err != nil || got != v {
				t.Fatalf("GET %s = %q, %v; want %q", k, got, err, v)
			}
			// It is stored on the master of its slot.
			master := redis.NewClient(&redis.Options{Addr: cl.MasterOf(redistest.Slot(k))})
			got, err := master.Get(ctx, k).Result()
			master.Close()
			if err != nil || got != v {
				t.Fatalf("GET %s on its master %s = %q, %v", k, cl.MasterOf(redistest.Slot(k)), got, err)
			}
		}
		return cc
	}

	t.Run("one node", func(t *testing.T) {
		checkCluster(t, "redis://"+addrs[0]+"/0")
		checkCluster(t, "redis://"+addrs[5]) // a replica is a cluster node too
	})
	t.Run("seed list", func(t *testing.T) {
		if !strings.Contains(cl.URL(), ",") {
			t.Fatalf("URL %q is not a seed list", cl.URL())
		}
		checkCluster(t, cl.URL())
		checkCluster(t, cl.URL()+"/0?pool_size=20")
	})
	t.Run("go-redis addr form", func(t *testing.T) {
		checkCluster(t, fmt.Sprintf("redis://%s?addr=%s&addr=%s", addrs[0], addrs[1], addrs[2]))
	})
	t.Run("db other than 0", func(t *testing.T) {
		for _, u := range []string{"redis://" + addrs[1] + "/3", cl.URL() + "/3", "redis://" + addrs[1] + "?db=3"} {
			_, err := tunnel.Open(ctx, u)
			if err == nil || !strings.Contains(err.Error(), "only database 0") || !strings.Contains(err.Error(), "drop the /3") {
				t.Errorf("Open(%q) = %v, want an error about database 0", u, err)
			}
		}
	})
	t.Run("failover", func(t *testing.T) {
		rdb := checkCluster(t, cl.URL())
		key := "rpr:v1:{open-failover}:k"
		old := cl.MasterOf(redistest.Slot(key))
		if err := rdb.Set(ctx, key, "before", 0).Err(); err != nil {
			t.Fatal(err)
		}
		cl.Kill(old)
		promoted := cl.WaitFailover(t, old, 30*time.Second)
		took := retrySet(t, ctx, rdb, key, "after")
		t.Logf("master %s failed over to %s; the Open client wrote again %v after that", old, promoted, took)
		if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "after" {
			t.Fatalf("GET after failover = %q, %v", got, err)
		}
	})
}

// A seed list of servers that are not Cluster nodes is refused with a hint.
func TestOpenClusterOfStandaloneServers(t *testing.T) {
	t.Parallel()
	ctx := openCtx(t)
	a, b := redistest.Start(t), redistest.Start(t)
	u := "redis://" + a.Addr() + "," + b.Addr()
	_, err := tunnel.Open(ctx, u)
	if err == nil || !strings.Contains(err.Error(), "not a Redis Cluster") {
		t.Fatalf("Open(%q) = %v, want an error saying these are not Cluster nodes", u, err)
	}
}

func TestOpenSentinel(t *testing.T) {
	t.Parallel()
	ctx := openCtx(t)
	se := redistest.StartSentinel(t)

	rdb := mustOpen(t, ctx, se.URL())
	c, ok := rdb.(*redis.Client)
	if !ok {
		t.Fatalf("Open(%s) = %T, want *redis.Client", se.URL(), rdb)
	}
	if err := c.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The db after the master name.
	rdb2 := mustOpen(t, ctx, se.URL()+"/2")
	if db := rdb2.(*redis.Client).Options().DB; db != 2 {
		t.Fatalf("db = %d, want 2", db)
	}

	// A name the sentinels do not monitor fails at Open, naming it.
	if _, err := tunnel.Open(ctx, strings.TrimSuffix(se.URL(), "/"+se.MasterName())+"/nosuchmaster"); err == nil ||
		!strings.Contains(err.Error(), `does not monitor a master named "nosuchmaster"`) {
		t.Errorf("Open with an unknown master name: %v", err)
	}

	old := se.KillMaster(t)
	promoted := se.WaitFailover(t, 30*time.Second)
	took := retrySet(t, ctx, c, "k", "after")
	t.Logf("master %s failed over to %s; the Open client wrote again %v after that", old, promoted, took)
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "after" {
		t.Fatalf("GET after failover = %q, %v", got, err)
	}
}

// When no sentinel answers, the error says what each one did.
func TestOpenSentinelUnreachable(t *testing.T) {
	t.Parallel()
	addr := nettest.RefusedAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	begin := time.Now()
	_, err := tunnel.Open(ctx, "redis+sentinel://"+addr+"/rpr")
	t.Logf("%v: %v", time.Since(begin), err)
	if err == nil || !strings.Contains(err.Error(), "sentinel "+addr+": ") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Open with no sentinel listening = %v, want it to say the sentinel refused the connection", err)
	}
}

func TestOpenBadURLs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct{ url, want string }{
		{"http://127.0.0.1:6379", `unknown scheme "http"`},
		{"127.0.0.1:6379", "no scheme"},
		{"redis-sentinel://127.0.0.1:26379/rpr", "unknown scheme"},
		{"redis+sentinel://127.0.0.1:26379,127.0.0.1:26380", "no master name"},
		{"redis+sentinel://127.0.0.1:26379/", "no master name"},
		{"redis+sentinel://127.0.0.1:26379/rpr/0/x", "want /master or /master/db"},
		{"redis+sentinel://127.0.0.1:26379/rpr/zero", `database "zero"`},
		{"redis://127.0.0.1:7001,127.0.0.1:7002/3", "only database 0"},
		{"redis://127.0.0.1:7001,,127.0.0.1:7002", "empty address"},
		{"redis://127.0.0.1:7001,127.0.0.1:7002?bogus=1", "bogus"},
		{"redis://127.0.0.1:6379/0?bogus=1", "bogus"},
		{"redis+sentinel://app:s3cret@127.0.0.1:26379,127.0.0.1:26380", "no master name"},
	} {
		_, err := tunnel.Open(ctx, tc.url)
		if err == nil {
			t.Errorf("Open(%q) succeeded", tc.url)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.want) {
			t.Errorf("Open(%q) = %v\nwant it to mention %q", tc.url, err, tc.want)
		}
		if !strings.Contains(msg, "accepted forms") || !strings.Contains(msg, "redis+sentinel://") {
			t.Errorf("Open(%q) = %v\nwant it to list the accepted forms", tc.url, err)
		}
		if !strings.Contains(msg, tunnel.RedactURL(tc.url)) || strings.Contains(msg, "s3cret") {
			t.Errorf("Open(%q) = %v\nwant it to name the URL, password hidden", tc.url, err)
		}
	}
}

func TestRedactURLForms(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                             "redis://127.0.0.1:6379/0",
		"rediss://app:s3cret@10.0.0.5:6380/0":                  "rediss://app:****@10.0.0.5:6380/0",
		"redis://:s3cret@h1:1,h2:2":                            "redis://:****@h1:1,h2:2",
		"redis://app:s3cret@[::1]:7001,[::1]:7002":             "redis://app:****@[::1]:7001,[::1]:7002",
		"redis+sentinel://app:s3cret@h1:1,h2:2/rpr/0":          "redis+sentinel://app:****@h1:1,h2:2/rpr/0",
		"redis+sentinel://h1:1/rpr?sentinel_password=s3cret&x": "redis+sentinel://h1:1/rpr?sentinel_password=****&x",
		"redis://h:1?password=s3cret&pool_size=5#frag":         "redis://h:1?password=****&pool_size=5#frag",
		"redis://user@h:1":                                     "redis://user@h:1",
		"not a url":                                            "not a url",
	} {
		if got := tunnel.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
