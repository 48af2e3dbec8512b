package redistest

// A real 6-node Redis Cluster (3 masters, 3 replicas) on loopback, for the
// tests where cluster behaviour is under test (DESIGN.md, "Quality bar"):
//
//	cl := redistest.StartCluster(t)          // about 1-3 s
//	rdb := cl.Client(t)                      // *redis.ClusterClient, closed when t ends
//	url := cl.URL()                          // "redis://127.0.0.1:P1,127.0.0.1:P2,...", for tunnel.Open
//	old := cl.MasterOf(redistest.Slot("rpr:v1:{svc}:req"))
//	cl.Kill(old)                             // SIGKILL: a crashed master
//	now := cl.WaitFailover(t, old, 20*time.Second) // its replica took over
//	cl.Start(t, old)                         // the old master comes back ...
//	cl.WaitHealthy(t, 20*time.Second)        // ... and rejoins as a replica
//
// The cluster is built with CLUSTER commands rather than `redis-cli
// --cluster create`: no 1 s sleeps, and every reply is checked (redis-cli
// exits 0 on error replies). Nodes are ordinary Servers, so the process
// hygiene of Start applies to each of them: pidfd handles, PDEATHSIG, our
// own PID in INFO before a node counts as started, stopped at cleanup.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// DefaultNodeTimeout is the cluster-node-timeout of StartCluster: how
	// long a master may be unreachable before its replica takes over
	// (failover then takes about 1.5-2.5x this).
	DefaultNodeTimeout = 2 * time.Second
	// clusterFormTimeout bounds how long StartCluster waits, after the nodes
	// run, for all of them to agree on a healthy cluster.
	clusterFormTimeout = 30 * time.Second
	clusterMasters     = 3
	clusterSlots       = 16384
	// busPortOffset is fixed by Redis: the cluster bus listens on port+10000.
	busPortOffset = 10000
	// Cluster nodes take ports from [clusterPortMin, clusterPortMax], so
	// their bus ports fall in [22000, 29999]: the two ranges do not overlap
	// (no node's port is another's bus port) and both lie below Linux's
	// ephemeral range (32768-60999), where client connections would take
	// them. A port this process has handed out is not handed out again
	// until its cluster is gone; other processes are caught by the
	// "Address already in use" retry.
	clusterPortMin = 12000
	clusterPortMax = 19999
	// pollInterval is the pause between two rounds of a readiness poll.
	pollInterval = 50 * time.Millisecond
)

// WithNodeTimeout sets cluster-node-timeout (StartCluster; default 2 s).
// Raise it when a starved CI box makes nodes miss each other's pings. It is
// an ordinary redis.conf directive, so it is harmless for Start.
func WithNodeTimeout(d time.Duration) Option {
	return WithConfig("cluster-node-timeout", strconv.FormatInt(d.Milliseconds(), 10))
}

// Cluster is a 3-master, 3-replica Redis Cluster started by StartCluster.
// Its methods are safe for concurrent use.
type Cluster struct {
	nodes  []*Server // fixed order: nodes[0:3] started as masters, nodes[3:6] as their replicas
	byAddr map[string]*Server

	mu    sync.Mutex
	slots map[string][][2]int // addr -> slot ranges it served when last seen as a master
}

// StartCluster starts six cluster nodes on free loopback ports (each with its
// bus port, port+10000, free as well), joins them into one cluster of three
// masters with one replica each, and waits until every node reports
// cluster_state:ok with all 16384 slots and 6 known nodes, every node agrees
// on 3 masters and 3 replicas, and every replica's link to its master is up.
//
// Nodes run with cluster-node-timeout 2000 (see WithNodeTimeout),
// repl-diskless-sync-delay 0, enable-debug-command yes, protected-mode no
// and no persistence apart from nodes.conf, each in its own t.TempDir().
// WithConfig directives apply to every node. A cleanup stops all nodes.
func StartCluster(tb testing.TB, opts ...Option) *Cluster {
	tb.Helper()
	begin := time.Now()
	cfg := config{startTimeout: DefaultStartTimeout}
	cfg.directives = [][2]string{
		{"protected-mode", "no"},
		{"repl-diskless-sync-delay", "0"}, // replicas sync at once, not 5 s later
		{"cluster-enabled", "yes"},
		{"cluster-config-file", "nodes.conf"},
		{"cluster-node-timeout", strconv.FormatInt(DefaultNodeTimeout.Milliseconds(), 10)},
		// Announce exactly the address clients can reach (MOVED, CLUSTER SLOTS).
		{"cluster-announce-ip", "127.0.0.1"},
	}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.directives = dataDirectives(cfg.directives)
	bin, err := findRedisServer()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	c := &Cluster{byAddr: map[string]*Server{}, slots: map[string][][2]int{}}
	for range 2 * clusterMasters {
		c.nodes = append(c.nodes, &Server{bin: bin, dir: tb.TempDir(), cfg: cfg})
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			c.logState(tb)
		}
		stopAll(c.nodes)
		for _, n := range c.nodes {
			releasePort(n.port)
		}
	})

	if err := startAll(c.nodes, func(s *Server) error { return startClusterNode(s) }); err != nil {
		tb.Fatalf("redistest: starting cluster nodes: %v", err)
	}
	for _, n := range c.nodes {
		c.byAddr[n.Addr()] = n
	}
	if err := c.create(time.Now().Add(clusterFormTimeout)); err != nil {
		tb.Fatalf("redistest: creating the cluster: %v", err)
	}
	tb.Logf("redistest: cluster %s up in %v", strings.Join(c.Addrs(), ","), time.Since(begin).Round(time.Millisecond))
	return c
}

// startClusterNode starts s on a port from the cluster range whose bus
// port is free too, trying another port after losing a port race.
func startClusterNode(s *Server) error {
	var lastErr error
	for range portAttempts {
		port, err := reserveClusterPort()
		if err != nil {
			return err
		}
		s.port = port
		if lastErr = s.start(); lastErr == nil {
			return nil
		}
		releasePort(port)
		if !errors.Is(lastErr, errPortInUse) {
			break
		}
	}
	return lastErr
}

var reserved = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// reserveClusterPort picks a random port in the cluster range that is free
// now, whose bus port is free now, and that no other cluster of this
// process holds. releasePort gives it back.
func reserveClusterPort() (int, error) {
	for range 500 {
		p := clusterPortMin + rand.IntN(clusterPortMax-clusterPortMin+1)
		reserved.Lock()
		taken := reserved.ports[p]
		if !taken {
			reserved.ports[p] = true
		}
		reserved.Unlock()
		if taken {
			continue
		}
		if portFree(p) && portFree(p+busPortOffset) {
			return p, nil
		}
		releasePort(p)
	}
	return 0, fmt.Errorf("no free port pair (port and port+%d) in %d-%d", busPortOffset, clusterPortMin, clusterPortMax)
}

func releasePort(p int) {
	reserved.Lock()
	delete(reserved.ports, p)
	reserved.Unlock()
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// startAll runs start for every server at once and returns the first error.
// Servers that did start stay running (the caller's cleanup stops them).
func startAll(servers []*Server, start func(*Server) error) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { errs[i] = start(s) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stopAll stops every server at once (SIGTERM, SIGKILL after 5 s) and
// returns when all are gone.
func stopAll(servers []*Server) {
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(s.Stop)
	}
	wg.Wait()
}

// create turns six empty nodes into a cluster: distinct config epochs (so no
// epoch collision has to be resolved), slots to the first three, MEET, then
// each of the last three replicates one of the first three.
func (c *Cluster) create(deadline time.Time) error {
	for i, n := range c.nodes {
		if err := expectOK(n.Addr(), "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return err
		}
	}
	for i := range clusterMasters {
		lo, hi := i*clusterSlots/clusterMasters, (i+1)*clusterSlots/clusterMasters-1
		if err := expectOK(c.nodes[i].Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return err
		}
	}
	seed := c.nodes[0].Addr()
	for _, n := range c.nodes[1:] {
		if err := expectOK(seed, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.port)); err != nil {
			return err
		}
	}
	// REPLICATE needs the replica to know its master's id, so first wait
	// until every node knows every other one (handshakes done).
	err := poll(deadline, func() error {
		for _, n := range c.nodes {
			view, err := clusterView(n.Addr())
			if err != nil {
				return err
			}
			if len(view) != len(c.nodes) {
				return fmt.Errorf("%s knows %d nodes, want %d", n.Addr(), len(view), len(c.nodes))
			}
			for _, e := range view {
				if e.has("handshake") || e.has("noaddr") {
					return fmt.Errorf("%s: %s is still %s", n.Addr(), e.addr, strings.Join(e.flags, ","))
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("nodes did not meet: %w", err)
	}
	for i, r := range c.nodes[clusterMasters:] {
		id, err := command(c.nodes[i].Addr(), "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		if err := expectOK(r.Addr(), "CLUSTER", "REPLICATE", fmt.Sprint(id)); err != nil {
			return err
		}
	}
	if err := poll(deadline, c.healthy); err != nil {
		return fmt.Errorf("cluster not healthy after %v: %w", clusterFormTimeout, err)
	}
	return nil
}

// WaitHealthy waits until all six nodes run and the cluster is as
// StartCluster left it: every node reports cluster_state:ok with all slots
// and 6 known nodes, no node is flagged failing, there are 3 masters and 3
// replicas, and every replica's link is up. Use it after Start to wait
// until a restarted node has rejoined (a killed master comes back as a
// replica of the node that replaced it). It fails tb after timeout.
func (c *Cluster) WaitHealthy(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	if err := poll(time.Now().Add(timeout), c.healthy); err != nil {
		tb.Fatalf("redistest: cluster not healthy after %v: %v", timeout, err)
	}
}

func (c *Cluster) healthy() error {
	for _, n := range c.nodes {
		if !n.Running() {
			return fmt.Errorf("node %s is not running", n.Addr())
		}
		replies, err := commands(n.Addr(), []string{"CLUSTER", "INFO"}, []string{"CLUSTER", "NODES"}, []string{"INFO", "replication"})
		if err != nil {
			return err
		}
		info, nodes, repl := fmt.Sprint(replies[0]), fmt.Sprint(replies[1]), fmt.Sprint(replies[2])
		for field, want := range map[string]string{
			"cluster_state":       "ok",
			"cluster_slots_ok":    strconv.Itoa(clusterSlots),
			"cluster_known_nodes": strconv.Itoa(len(c.nodes)),
		} {
			if got := infoField(info, field); got != want {
				return fmt.Errorf("%s: %s:%s, want %s", n.Addr(), field, got, want)
			}
		}
		view := parseClusterNodes(nodes)
		masters, replicas := 0, 0
		for _, e := range view {
			switch {
			case e.has("fail") || e.has("fail?") || e.has("handshake") || e.has("noaddr"):
				return fmt.Errorf("%s sees %s as %s", n.Addr(), e.addr, strings.Join(e.flags, ","))
			case e.has("master") && len(e.slots) > 0:
				masters++
			case e.has("slave"):
				replicas++
			}
		}
		if masters != clusterMasters || replicas != len(c.nodes)-clusterMasters {
			return fmt.Errorf("%s sees %d masters with slots and %d replicas, want %d and %d",
				n.Addr(), masters, replicas, clusterMasters, len(c.nodes)-clusterMasters)
		}
		if infoField(repl, "role") == "slave" {
			if got := infoField(repl, "master_link_status"); got != "up" {
				return fmt.Errorf("replica %s: master_link_status:%s", n.Addr(), got)
			}
		}
		c.remember(view)
	}
	return nil
}

// Addrs returns the addresses of all six nodes, "127.0.0.1:PORT", in a
// fixed order (the first three started as masters). They stay the same
// across Kill and Start.
func (c *Cluster) Addrs() []string { return addrsOf(c.nodes) }

// addrsOf returns the addresses of servers, in their order.
func addrsOf(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, n := range servers {
		addrs[i] = n.Addr()
	}
	return addrs
}

// URL returns "redis://ADDR1,ADDR2,...,ADDR6": every node as a seed, the
// form tunnel.Open accepts for a cluster.
func (c *Cluster) URL() string { return "redis://" + strings.Join(c.Addrs(), ",") }

// Node returns the node at addr (for Pause, Resume, PID, LogPath ...), or
// nil if addr is not one of the cluster's.
func (c *Cluster) Node(addr string) *Server { return c.byAddr[addr] }

// Client returns a new cluster client seeded with every node, closed when tb
// ends. It uses go-redis defaults apart from the addresses and a 1 s
// ClusterStateReloadInterval: go-redis (v9.22 and later) reloads the slot map
// on MOVED but not when a master refuses connections, and by default only
// every 60 s (redis/go-redis#3979), so after a failover a default client
// keeps dialling the dead master for up to a minute. tunnel.Open works
// around the same problem in its own way.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ClusterStateReloadInterval: time.Second})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Masters returns the addresses of the masters that serve slots and are not
// flagged failing, in slot order, as the first running node that answers
// sees them; nil if no node answers.
func (c *Cluster) Masters() []string {
	view, err := c.liveView()
	if err != nil {
		return nil
	}
	type master struct {
		addr  string
		first int
	}
	var ms []master
	for _, e := range view {
		if e.has("master") && !e.has("fail") && len(e.slots) > 0 {
			ms = append(ms, master{e.addr, e.slots[0][0]})
		}
	}
	slices.SortFunc(ms, func(a, b master) int { return a.first - b.first })
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.addr
	}
	return out
}

// MasterOf returns the address of the node serving slot, as the first
// running node that answers sees it; "" if no node answers or the slot is
// unassigned. Slot(key) gives a key's slot.
func (c *Cluster) MasterOf(slot int) string {
	view, err := c.liveView()
	if err != nil {
		return ""
	}
	if e := ownerOf(view, slot); e != nil {
		return e.addr
	}
	return ""
}

// liveView returns CLUSTER NODES of the first running node that answers.
func (c *Cluster) liveView() ([]nodeEntry, error) {
	var lastErr error = errors.New("no node is running")
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		view, err := clusterView(n.Addr())
		if err != nil {
			lastErr = err
			continue
		}
		c.remember(view)
		return view, nil
	}
	return nil, lastErr
}

// remember records which slots each master serves in view, so that
// WaitFailover knows what a killed master served.
func (c *Cluster) remember(view []nodeEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range view {
		if e.has("master") && !e.has("fail") && len(e.slots) > 0 {
			c.slots[e.addr] = e.slots
		}
	}
}
