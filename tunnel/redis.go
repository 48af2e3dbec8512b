package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/redisinfo"
	"github.com/rprtunnel/rpr/internal/store"
)

// Open connects to the Redis at rawURL and checks that it answers. The
// result is a go-redis UniversalClient shared by a Client and a Server in
// one process; close it when both are closed. It accepts:
//
//	redis://10.0.0.5:6379/0                 one server (db 0 if the path is empty)
//	rediss://app:secret@10.0.0.5:6380/0     the same over TLS, with an ACL user
//	redis://10.0.0.5:7001                   any one node of a Redis Cluster
//	redis://10.0.0.5:7001,10.0.0.6:7001     Cluster seed nodes (rediss:// too)
//	redis://10.0.0.5:7001?addr=10.0.0.6:7001&addr=10.0.0.7:7001
//	                                        the same, in go-redis's own form
//	redis+sentinel://10.0.0.5:26379,10.0.0.6:26379,10.0.0.7:26379/mymaster/0
//	                                        Sentinel: sentinel addresses, then
//	                                        the master name, then the db
//	rediss+sentinel://app:secret@s1:26379,s2:26379/mymaster
//	                                        Sentinel, TLS to sentinels and data nodes
//	unix:///run/redis.sock?db=0             one server over a Unix socket
//
// A single redis:// or rediss:// address gives a *redis.Client, unless the
// server reports cluster_enabled:1 (INFO cluster): then Open returns a
// *redis.ClusterClient seeded with it, so pointing rpr at any node of a
// Cluster just works. Several addresses give a *redis.ClusterClient. A
// Cluster has only database 0, so /1 and up are refused there. The
// Sentinel forms give go-redis's failover client (a *redis.Client that asks
// the sentinels for the current master and follows failovers); a user and
// password in the URL authenticate to the master and replicas, and
// ?sentinel_username= and ?sentinel_password= to the sentinels, if those
// require it. Every form takes the query options go-redis understands for
// that kind of client (e.g. ?dial_timeout=3s&pool_size=64).
//
// The TLS forms (rediss://, rediss+sentinel://) verify the server's
// certificate against the system's CAs (or SSL_CERT_FILE) and take, in
// each of their forms:
//
//	?tls_ca=/etc/rpr/ca.pem                 CA certificates (PEM) to verify the server
//	                                        against, in place of the system's
//	?tls_cert=/etc/rpr/client.pem&tls_key=/etc/rpr/client-key.pem
//	                                        a client certificate and its key (PEM), for
//	                                        mutual TLS (Redis's tls-auth-clients)
//	?tls_server_name=redis.internal         the name every server's certificate must
//	                                        carry; default: the URL's first host, for
//	                                        every node, sentinel and master alike
//	?skip_verify=true                       go-redis's own: no verification at all
//
// Open reads the files once, at the call, and refuses an unreadable file,
// one without the PEM blocks wanted, a certificate without its key (or the
// reverse), and a TLS parameter on a scheme without TLS, naming the
// parameter and the file. A rediss:// address whose server does not speak
// TLS fails within the dial, with an error saying so: when the handshake
// gets no answer for half a second, or the server closes it, rpr sends
// PING on a plain connection to the same address, and a Redis reply there
// ends the dial.
//
// Cluster clients reload the slot map when a node stops answering, not only
// on MOVED: go-redis (v9.22 and later) would otherwise keep dialling a
// failed master for up to a minute after its replica took over
// (redis/go-redis#3979).
//
// Blocking stream reads (one per Client per service it calls, one per
// Server per service it serves) hold a pooled connection while they wait;
// the default pool (ten connections per CPU, per node for a Cluster)
// leaves room for command traffic. rpr checks this: Serve refuses to
// start, and a Client refuses a new service, when the blocking reads would
// leave fewer than four connections for commands; raise ?pool_size= then.
func Open(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	target, err := parseRedisURL(rawURL)
	if err != nil {
		return nil, urlError(rawURL, err)
	}
	switch {
	case target.failover != nil:
		o := target.failover
		rdb := redis.NewFailoverClient(o)
		if err := rdb.Ping(ctx).Err(); err != nil {
			_ = rdb.Close()
			return nil, fmt.Errorf("rpr: connect to redis master %q through the sentinels at %s: %w%s (%s)",
				o.MasterName, RedactURL(rawURL), err, refusedCertHint(err, o.TLSConfig), askSentinels(o))
		}
		return rdb, nil
	case target.cluster != nil:
		return openCluster(ctx, target.cluster, rawURL)
	}

	rdb := redis.NewClient(target.single)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		if db := target.single.DB; db != 0 && strings.Contains(err.Error(), "SELECT is not allowed in cluster mode") {
			return nil, urlError(rawURL, clusterDBError(strconv.Itoa(db)))
		}
		return nil, fmt.Errorf("rpr: connect to redis at %s: %w%s", RedactURL(rawURL), err, refusedCertHint(err, target.single.TLSConfig))
	}
	if target.parts == nil { // a Unix socket
		return rdb, nil
	}
	isCluster, err := clusterEnabled(ctx, rdb)
	if err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("rpr: connect to redis at %s: INFO cluster: %w", RedactURL(rawURL), err)
	}
	if !isCluster {
		return rdb, nil
	}
	_ = rdb.Close()
	opts, err := parseClusterParts(*target.parts)
	if err != nil {
		return nil, urlError(rawURL, fmt.Errorf("the server is a Redis Cluster node, but the URL has an option a cluster client does not take: %w", err))
	}
	return openCluster(ctx, opts, rawURL)
}

// askSentinels explains a failed Sentinel connection: go-redis often says
// only "context deadline exceeded". It asks every sentinel, at once and
// briefly (the caller's context may be spent), for the master's address.
func askSentinels(o *redis.FailoverOptions) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	answers := make([]string, len(o.SentinelAddrs))
	var wg sync.WaitGroup
	for i, addr := range o.SentinelAddrs {
		wg.Go(func() {
			c := redis.NewClient(&redis.Options{
				Addr: addr, Username: o.SentinelUsername, Password: o.SentinelPassword,
				TLSConfig: o.TLSConfig, Dialer: o.Dialer, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second,
			})
			defer c.Close()
			master, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", o.MasterName).StringSlice()
			switch {
			case errors.Is(err, redis.Nil):
				answers[i] = fmt.Sprintf("sentinel %s does not monitor a master named %q", addr, o.MasterName)
			case err != nil:
				answers[i] = fmt.Sprintf("sentinel %s: %v", addr, err)
			case len(master) == 2:
				answers[i] = fmt.Sprintf("sentinel %s names master %s", addr, net.JoinHostPort(master[0], master[1]))
			default:
				answers[i] = fmt.Sprintf("sentinel %s: unexpected answer %q", addr, master)
			}
		})
	}
	wg.Wait()
	return strings.Join(answers, "; ")
}

// clusterEnabled reports whether the server behind rdb is a Cluster node.
// It asks CLUSTER INFO first, which a standalone server refuses with
// "cluster support disabled" and which an ACL user may run without INFO
// (@dangerous; the users `rpr acl` prints have +cluster|info and no
// INFO); when CLUSTER INFO is refused otherwise (an ACL without it), it
// asks INFO cluster. A server that refuses both counts as standalone.
func clusterEnabled(ctx context.Context, rdb *redis.Client) (bool, error) {
	_, err := rdb.ClusterInfo(ctx).Result()
	var reply redis.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &reply) && strings.Contains(err.Error(), "cluster support disabled"):
		return false, nil
	case !errors.As(err, &reply):
		return false, err
	}
	info, err := rdb.Info(ctx, "cluster").Result()
	if err != nil {
		if errors.As(err, &reply) {
			return false, nil
		}
		return false, err
	}
	return redisinfo.Field(info, "cluster_enabled") == "1", nil
}

// clusterStateReloadInterval bounds how stale a Cluster client's slot map
// may get without errors; go-redis's default is 60 s since v9.22 (10 s
// before). The reload is one CLUSTER SLOTS.
const clusterStateReloadInterval = 10 * time.Second

func openCluster(ctx context.Context, opts *redis.ClusterOptions, rawURL string) (*redis.ClusterClient, error) {
	if opts.ClusterStateReloadInterval == 0 {
		opts.ClusterStateReloadInterval = clusterStateReloadInterval
	}
	rdb := redis.NewClusterClient(opts)
	rdb.AddHook(reloadOnNodeError{rdb})
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		hint := ""
		if strings.Contains(err.Error(), "cluster support disabled") {
			hint = " (not a Redis Cluster: for one standalone server give a single host:port)"
		}
		return nil, fmt.Errorf("rpr: connect to redis cluster at %s: %w%s%s", RedactURL(rawURL), err, hint, refusedCertHint(err, opts.TLSConfig))
	}
	return rdb, nil
}

// reloadOnNodeError makes a Cluster client reload its slot map when a
// command fails without a reply from Redis (connection refused, reset or
// timed out). go-redis reloads on MOVED but not on these, so after a
// failover it would keep sending a dead master's slots to the dead master
// until the periodic reload (redis/go-redis#3979). The reload runs in the
// background and concurrent ones coalesce, so a burst of failures costs a
// few CLUSTER SLOTS.
type reloadOnNodeError struct{ rdb *redis.ClusterClient }

func (h reloadOnNodeError) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnNodeError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if nodeUnreachable(err) {
			h.rdb.ReloadState(ctx)
		}
		return err
	}
}

func (h reloadOnNodeError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if nodeUnreachable(c.Err()) {
				h.rdb.ReloadState(ctx)
				break
			}
		}
		return err
	}
}

// nodeUnreachable: err is not a reply from Redis (any reply, redis.Nil and
// error replies included, means the node is there) nor the caller's doing.
func nodeUnreachable(err error) bool {
	if err == nil || errors.Is(err, redis.ErrClosed) || errors.Is(err, context.Canceled) {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}

// poolSize returns the connection pool size of rdb (per node for a
// Cluster; a Sentinel failover client is a *redis.Client), or 0 when it
// cannot be told (a UniversalClient of another kind).
func poolSize(rdb redis.UniversalClient) int {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().PoolSize
	case *redis.ClusterClient:
		return c.Options().PoolSize
	}
	return 0
}

// checkPool refuses a pool too small for the blocking reads a process
// holds open: each keeps a pooled connection for as long as its reader
// runs (xread.Reader.KeepConn), and commands need connections too. needed
// is the number of blocking reads.
func checkPool(rdb redis.UniversalClient, needed int, who string) error {
	size := poolSize(rdb)
	if size == 0 || needed+minFreeConns <= size {
		return nil
	}
	return fmt.Errorf("rpr: %s keeps %d blocking reads open but the Redis pool has only %d connections; set pool_size=%d or more (redis URL ?pool_size=, or redis.Options.PoolSize)", who, needed, size, needed+minFreeConns)
}

// minFreeConns is the number of pooled connections kept for commands
// beyond the blocking reads.
const minFreeConns = 4

// neverRan reports whether err, the failure of a write, proves that the
// write had no effect, so that the call it carried was not sent: Redis
// answered a plain command with an error (an error reply means the
// command did nothing: OOM, READONLY, LOADING, NOPERM...), refused to run
// a script at all, or no connection to Redis was ever made (a failed
// dial, no free connection in the pool), so nothing was written. That
// reading holds only for a write go-redis tried once: after a resend, the
// last attempt's error says nothing of the first, which may have reached
// Redis. The writes it judges are sent with store.AtMostOnce.
func neverRan(err error) bool {
	if err == nil {
		return false
	}
	var script *store.ScriptError
	if errors.As(err, &script) {
		return !script.Started
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, redis.ErrPoolTimeout)
}
