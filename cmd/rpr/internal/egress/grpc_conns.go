package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"

	"github.com/rprtunnel/rpr/cmd/rpr/internal/upstream"
)

// upstreamConns keeps one gRPC connection per upstream address, shared by
// the routes that name it. A connection whose upstream left the table is
// closed once its last call ends.
type upstreamConns struct {
	tls *tls.Config

	mu     sync.Mutex
	conns  map[string]*upstreamConn // by Route.Upstream
	table  *upstream.Table          // the table conns was last checked against
	closed bool
}

// upstreamConn is one cached connection and the calls using it.
type upstreamConn struct {
	key   string
	cc    *grpc.ClientConn
	calls int
	stale bool // its upstream left the table: close it once unused
}

func newUpstreamConns(cfg *tls.Config) *upstreamConns {
	return &upstreamConns{tls: cfg, conns: map[string]*upstreamConn{}}
}

// get returns the connection to r's upstream, creating it (gRPC connects
// on first use), counted as used until put. table is the one r is from:
// when it is new, connections to upstreams it no longer names are retired.
func (c *upstreamConns) get(table *upstream.Table, r *upstream.Route) (*upstreamConn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("the egress is shutting down")
	}
	var retired []*grpc.ClientConn
	if table != c.table {
		c.table = table
		retired = c.retireLocked(table)
	}
	conn, ok := c.conns[r.Upstream]
	if !ok {
		cc, err := c.dial(r)
		if err != nil {
			c.mu.Unlock()
			closeAll(retired)
			return nil, err
		}
		conn = &upstreamConn{key: r.Upstream, cc: cc}
		c.conns[r.Upstream] = conn
	}
	conn.calls++
	c.mu.Unlock()
	closeAll(retired)
	return conn, nil
}

// put gives back a connection get returned.
func (c *upstreamConns) put(conn *upstreamConn) {
	c.mu.Lock()
	conn.calls--
	done := conn.stale && conn.calls == 0
	c.mu.Unlock()
	if done {
		_ = conn.cc.Close()
	}
}

// retireLocked marks the connections to upstreams table does not name
// and returns those no call uses, for closing.
func (c *upstreamConns) retireLocked(table *upstream.Table) []*grpc.ClientConn {
	named := map[string]bool{}
	for _, r := range table.Routes() {
		named[r.Upstream] = true
	}
	var idle []*grpc.ClientConn
	for key, conn := range c.conns {
		if named[key] {
			continue
		}
		delete(c.conns, key)
		conn.stale = true
		if conn.calls == 0 {
			idle = append(idle, conn.cc)
		}
	}
	return idle
}

// close closes every connection; calls still using one fail.
func (c *upstreamConns) close() {
	c.mu.Lock()
	c.closed = true
	var all []*grpc.ClientConn
	for key, conn := range c.conns {
		delete(c.conns, key)
		conn.stale = true
		all = append(all, conn.cc)
	}
	c.mu.Unlock()
	closeAll(all)
}

func closeAll(ccs []*grpc.ClientConn) {
	for _, cc := range ccs {
		_ = cc.Close()
	}
}

// dial makes a connection to r's upstream: cleartext HTTP/2 for grpc://,
// TLS for grpcs:// (the egress's TLS config, else the system's roots),
// never through a proxy from the environment, with no service config
// from DNS (an upstream does not configure the egress).
func (c *upstreamConns) dial(r *upstream.Route) (*grpc.ClientConn, error) {
	u := r.Target()
	host, port := u.Hostname(), u.Port()
	creds := insecure.NewCredentials()
	if u.Scheme == "grpcs" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.tls != nil {
			cfg = c.tls.Clone()
		}
		creds = credentials.NewTLS(cfg)
		if port == "" {
			port = "443"
		}
	} else if port == "" {
		port = "80"
	}
	cc, err := grpc.NewClient(net.JoinHostPort(host, port),
		grpc.WithTransportCredentials(creds),
		grpc.WithNoProxy(),
		grpc.WithDisableServiceConfig(),
		grpc.WithStatsHandler(trackStats{}),
	)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", r.Upstream, err)
	}
	return cc, nil
}

// callTrack records what gRPC saw of one upstream call.
type callTrack struct {
	// answered: the upstream's trailers arrived, so the call's status is
	// the upstream's own; without them gRPC made it (connection broken,
	// deadline passed).
	answered atomic.Bool
}

type trackKey struct{}

func withTrack(ctx context.Context, t *callTrack) context.Context {
	return context.WithValue(ctx, trackKey{}, t)
}

// trackStats is the stats.Handler that fills each call's callTrack.
type trackStats struct{}

func (trackStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (trackStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.InTrailer); ok {
		if t, ok := ctx.Value(trackKey{}).(*callTrack); ok {
			t.answered.Store(true)
		}
	}
}

func (trackStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (trackStats) HandleConn(context.Context, stats.ConnStats) {}
