package redistest

// A real Sentinel setup on loopback: one master, one replica and three
// sentinels (quorum 2), for the tests where failover behaviour is under test:
//
//	se := redistest.StartSentinel(t)        // about 2-5 s: sentinels meet through 2 s hellos
//	url := se.URL()                          // "redis+sentinel://127.0.0.1:P1,...,127.0.0.1:P3/rpr", for tunnel.Open
//	old := se.KillMaster(t)                  // SIGKILL: a crashed master
//	now := se.WaitFailover(t, 20*time.Second) // the replica was promoted
//	se.Restart(t, old)                       // the old master comes back as a replica ...
//	se.WaitHealthy(t, 20*time.Second)        // ... and sentinels see it as one
//
// Every process is started and stopped like Start's (pidfd handles,
// PDEATHSIG, readiness by INFO process_id, cleanup at the end of the test).

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultMasterName is the name the sentinels of StartSentinel monitor.
const DefaultMasterName = "rpr"

const (
	sentinelCount  = 3
	sentinelQuorum = 2
	// defaultDownAfter is down-after-milliseconds: how long the master may
	// be unreachable before a sentinel considers it down.
	defaultDownAfter = time.Second
	// sentinelFailoverTimeout is also the retry delay after a split leader
	// vote (twice this); Sentinel's default of 180 s would stall a test.
	sentinelFailoverTimeout = 5 * time.Second
	// sentinelFormTimeout bounds how long StartSentinel waits for the
	// sentinels to find the replica and each other (hellos every 2 s).
	sentinelFormTimeout = 30 * time.Second
	sentinelConfName    = "sentinel.conf"
)

// WithMasterName sets the name the sentinels monitor (StartSentinel only;
// default "rpr").
func WithMasterName(name string) Option {
	return WithConfig(pseudoPrefix+"master-name", name)
}

// WithDownAfter sets the sentinels' down-after-milliseconds (StartSentinel
// only; default 1 s). Raise it when a starved CI box makes sentinels see
// a busy master as down.
func WithDownAfter(d time.Duration) Option {
	return WithConfig(pseudoPrefix+"down-after", strconv.FormatInt(d.Milliseconds(), 10))
}

// Sentinel is one master, one replica and three sentinels started by
// StartSentinel. Its methods are safe for concurrent use.
type Sentinel struct {
	name      string
	data      []*Server // data[0] started as the master, data[1] as its replica
	sentinels []*Server

	mu     sync.Mutex
	killed string // the master KillMaster killed last
}

// StartSentinel starts a master and a replica on free loopback ports, then
// three sentinels that monitor the master under the name "rpr" (see
// WithMasterName) with quorum 2, down-after-milliseconds 1000 (see
// WithDownAfter) and failover-timeout 5000. It waits until the replica's
// link is up and every sentinel sees the master, its replica and the two
// other sentinels.
//
// Master and replica run like Start's servers plus protected-mode no and
// repl-diskless-sync-delay 0; WithConfig directives apply to both (not to
// the sentinels). Each sentinel has its own t.TempDir() with a
// sentinel.conf that it rewrites as Sentinel does. A cleanup stops all five.
func StartSentinel(tb testing.TB, opts ...Option) *Sentinel {
	tb.Helper()
	begin := time.Now()
	cfg := config{startTimeout: DefaultStartTimeout}
	cfg.directives = [][2]string{
		{"protected-mode", "no"},
		{"repl-diskless-sync-delay", "0"},
		{"replica-announce-ip", "127.0.0.1"},
	}
	for _, o := range opts {
		o(&cfg)
	}
	name := pseudo(cfg.directives, "master-name", DefaultMasterName)
	downAfter := pseudo(cfg.directives, "down-after", strconv.FormatInt(defaultDownAfter.Milliseconds(), 10))
	cfg.directives = dataDirectives(cfg.directives)
	bin, err := findRedisServer()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}

	s := &Sentinel{name: name}
	for range 2 {
		s.data = append(s.data, &Server{bin: bin, dir: tb.TempDir(), cfg: cfg})
	}
	for range sentinelCount {
		s.sentinels = append(s.sentinels, &Server{bin: bin, dir: tb.TempDir(), cfg: config{startTimeout: cfg.startTimeout}})
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			s.logState(tb)
		}
		stopAll(s.all())
	})

	master, replica := s.data[0], s.data[1]
	if err := startFreePort(master, master.start); err != nil {
		tb.Fatalf("redistest: starting the master: %v", err)
	}
	replica.cfg.directives = append(slices.Clone(replica.cfg.directives), [2]string{"replicaof", "127.0.0.1 " + strconv.Itoa(master.port)})
	if err := startFreePort(replica, replica.start); err != nil {
		tb.Fatalf("redistest: starting the replica: %v", err)
	}
	err = startAll(s.sentinels, func(sn *Server) error {
		return startFreePort(sn, func() error {
			conf := sentinelConf(sn, name, master.port, downAfter)
			if err := os.WriteFile(filepath.Join(sn.dir, sentinelConfName), []byte(conf), 0o644); err != nil {
				return err
			}
			return sn.run(sentinelConfName, "--sentinel")
		})
	})
	if err != nil {
		tb.Fatalf("redistest: starting sentinels: %v", err)
	}
	if err := poll(time.Now().Add(sentinelFormTimeout), s.healthy); err != nil {
		tb.Fatalf("redistest: sentinels did not converge within %v: %v", sentinelFormTimeout, err)
	}
	tb.Logf("redistest: sentinel %s (master %s, replica %s) up in %v",
		s.URL(), master.Addr(), replica.Addr(), time.Since(begin).Round(time.Millisecond))
	return s
}

func sentinelConf(sn *Server, name string, masterPort int, downAfterMS string) string {
	var b strings.Builder
	b.WriteString("# written by internal/redistest; Sentinel rewrites this file (myid, peers, epochs)\n")
	fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\nprotected-mode no\n", sn.port)
	fmt.Fprintf(&b, "dir %s\n", sn.dir)
	b.WriteString("daemonize no\nlogfile \"\"\n")
	// The address announced to the other sentinels in hellos.
	b.WriteString("sentinel announce-ip 127.0.0.1\n")
	fmt.Fprintf(&b, "sentinel monitor %s 127.0.0.1 %d %d\n", name, masterPort, sentinelQuorum)
	// Tuning lines must come after `sentinel monitor`.
	fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %s\n", name, downAfterMS)
	fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", name, sentinelFailoverTimeout.Milliseconds())
	return b.String()
}

// healthy: both data nodes run, every sentinel names the same master, which
// is a master with one replica whose link is up, and every sentinel sees
// that replica (not flagged down) and the two other sentinels.
func (s *Sentinel) healthy() error {
	for _, d := range s.data {
		if !d.Running() {
			return fmt.Errorf("data node %s is not running", d.Addr())
		}
	}
	master := ""
	for _, sn := range s.sentinels {
		if !sn.Running() {
			return fmt.Errorf("sentinel %s is not running", sn.Addr())
		}
		m, err := s.askMaster(sn)
		if err != nil {
			return err
		}
		if master != "" && m != master {
			return fmt.Errorf("sentinels disagree on the master: %s and %s", master, m)
		}
		master = m
	}
	replica := ""
	for _, d := range s.data {
		if d.Addr() != master {
			replica = d.Addr()
		}
	}
	if s.node(master) == nil || replica == "" {
		return fmt.Errorf("sentinels name %s as master, not one of ours (%s, %s)", master, s.data[0].Addr(), s.data[1].Addr())
	}
	if role, err := roleOf(master); err != nil || role != "master" {
		return fmt.Errorf("master %s: ROLE %s %v", master, role, err)
	}
	repl, err := command(replica, "INFO", "replication")
	if err != nil {
		return err
	}
	info := fmt.Sprint(repl)
	if got := infoField(info, "master_link_status"); infoField(info, "role") != "slave" || got != "up" ||
		net.JoinHostPort(infoField(info, "master_host"), infoField(info, "master_port")) != master {
		return fmt.Errorf("replica %s: role:%s master %s:%s master_link_status:%s, want a link to %s",
			replica, infoField(info, "role"), infoField(info, "master_host"), infoField(info, "master_port"), got, master)
	}
	for _, sn := range s.sentinels {
		replies, err := commands(sn.Addr(), []string{"SENTINEL", "MASTER", s.name}, []string{"SENTINEL", "REPLICAS", s.name})
		if err != nil {
			return err
		}
		m := pairs(replies[0])
		if m["flags"] != "master" || m["num-other-sentinels"] != strconv.Itoa(sentinelCount-1) {
			return fmt.Errorf("sentinel %s: %s flags=%s num-other-sentinels=%s", sn.Addr(), s.name, m["flags"], m["num-other-sentinels"])
		}
		seen := false
		for _, r := range asList(replies[1]) {
			rm := pairs(r)
			if net.JoinHostPort(rm["ip"], rm["port"]) == replica {
				seen = rm["flags"] == "slave"
				if !seen {
					return fmt.Errorf("sentinel %s sees replica %s as %s", sn.Addr(), replica, rm["flags"])
				}
			}
		}
		if !seen {
			return fmt.Errorf("sentinel %s does not know replica %s yet", sn.Addr(), replica)
		}
	}
	return nil
}

// askMaster asks one sentinel for the master's address.
func (s *Sentinel) askMaster(sn *Server) (string, error) {
	v, err := command(sn.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.name)
	if err != nil {
		return "", err
	}
	a := asList(v)
	if len(a) != 2 {
		return "", fmt.Errorf("sentinel %s: no master named %q (%v)", sn.Addr(), s.name, v)
	}
	return net.JoinHostPort(fmt.Sprint(a[0]), fmt.Sprint(a[1])), nil
}

// URL returns "redis+sentinel://S1,S2,S3/NAME", the form tunnel.Open accepts
// for Sentinel.
func (s *Sentinel) URL() string {
	return "redis+sentinel://" + strings.Join(s.SentinelAddrs(), ",") + "/" + s.name
}

// Client returns a new go-redis failover client (it asks the sentinels for
// the master and follows failovers), closed when tb ends.
func (s *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.name, SentinelAddrs: s.SentinelAddrs()})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// SentinelAddrs returns the sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string { return addrsOf(s.sentinels) }

// DataAddrs returns the addresses of the two data nodes: the one started as
// master first, then the one started as replica.
func (s *Sentinel) DataAddrs() []string { return addrsOf(s.data) }

// MasterName returns the name the sentinels monitor.
func (s *Sentinel) MasterName() string { return s.name }

// Node returns the data node or sentinel at addr, or nil. Kill, Stop, Pause
// and Resume work on both; Restart only on a data node (on a sentinel it
// would start a plain server: use Sentinel.Restart for data nodes).
func (s *Sentinel) Node(addr string) *Server {
	for _, n := range s.all() {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

func (s *Sentinel) node(addr string) *Server {
	for _, d := range s.data {
		if d.Addr() == addr {
			return d
		}
	}
	return nil
}

// Master returns the master's address as the running sentinels report it
// (the answer most of them give), or "" if none answers.
func (s *Sentinel) Master() string {
	votes := map[string]int{}
	best := ""
	for _, sn := range s.sentinels {
		if !sn.Running() {
			continue
		}
		if m, err := s.askMaster(sn); err == nil {
			votes[m]++
			if votes[m] > votes[best] {
				best = m
			}
		}
	}
	return best
}

// KillMaster sends SIGKILL to the current master (as Master reports it),
// waits until the process is gone and returns its address. WaitFailover
// then waits for the replica's promotion.
func (s *Sentinel) KillMaster(tb testing.TB) string {
	tb.Helper()
	m := s.Master()
	n := s.node(m)
	if n == nil {
		tb.Fatalf("redistest: KillMaster: sentinels report master %q, not one of ours (%s)", m, strings.Join(s.DataAddrs(), ", "))
	}
	s.mu.Lock()
	s.killed = m
	s.mu.Unlock()
	n.Kill()
	return m
}

// WaitFailover waits until every running sentinel reports a new master (not
// the one KillMaster killed last) and that node answers ROLE with master,
// and returns its address. It fails tb after timeout. With the defaults a
// failover takes about 2-3 s.
func (s *Sentinel) WaitFailover(tb testing.TB, timeout time.Duration) string {
	tb.Helper()
	s.mu.Lock()
	old := s.killed
	s.mu.Unlock()
	if old == "" {
		tb.Fatalf("redistest: WaitFailover without KillMaster: which master should be replaced?")
	}
	var newMaster string
	err := poll(time.Now().Add(timeout), func() error {
		m := ""
		for _, sn := range s.sentinels {
			if !sn.Running() {
				continue
			}
			got, err := s.askMaster(sn)
			if err != nil {
				return err
			}
			if got == old {
				return fmt.Errorf("sentinel %s still names %s", sn.Addr(), old)
			}
			if m != "" && got != m {
				return fmt.Errorf("sentinels disagree: %s and %s", m, got)
			}
			m = got
		}
		if s.node(m) == nil {
			return fmt.Errorf("new master %q is not one of ours", m)
		}
		if role, err := roleOf(m); err != nil || role != "master" {
			return fmt.Errorf("new master %s: ROLE %s %v", m, role, err)
		}
		newMaster = m
		return nil
	})
	if err != nil {
		tb.Fatalf("redistest: no sentinel failover away from %s within %v: %v", old, timeout, err)
	}
	return newMaster
}

// Restart starts the data node at addr again on its port and in its
// directory (stopping it first if it runs), as a replica of the current
// master, the way config management brings a failed node back. Its data is
// gone (no persistence). Restart returns once the process answers;
// WaitHealthy waits until it has synced and the sentinels see it.
//
// Without the replicaof line a returning old master would run as an empty,
// writable master for about 10 s until Sentinel demotes it; tests of that
// window can Node(addr).Restart(t) instead.
func (s *Sentinel) Restart(tb testing.TB, addr string) {
	tb.Helper()
	n := s.node(addr)
	if n == nil {
		tb.Fatalf("redistest: %s is not a data node of this setup (%s)", addr, strings.Join(s.DataAddrs(), ", "))
	}
	n.cfg.directives = slices.DeleteFunc(slices.Clone(n.cfg.directives), func(d [2]string) bool { return d[0] == "replicaof" })
	if m := s.Master(); m != "" && m != addr {
		host, port, _ := net.SplitHostPort(m)
		n.cfg.directives = append(n.cfg.directives, [2]string{"replicaof", host + " " + port})
	}
	n.Restart(tb)
}

// all returns the data nodes and the sentinels.
func (s *Sentinel) all() []*Server { return slices.Concat(s.data, s.sentinels) }

// WaitHealthy waits until both data nodes run, every sentinel names the
// same master, the other node is its replica with its link up, and every
// sentinel sees that replica (not flagged down) and its two peers. It fails
// tb after timeout.
func (s *Sentinel) WaitHealthy(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	if err := poll(time.Now().Add(timeout), s.healthy); err != nil {
		tb.Fatalf("redistest: sentinel setup not healthy after %v: %v", timeout, err)
	}
}

func (s *Sentinel) logState(tb testing.TB) {
	for _, n := range s.all() {
		tb.Logf("redistest: end of %s (%s):\n%s", n.LogPath(), n.Addr(), n.logTail(10))
	}
}

// roleOf returns the first element of ROLE at addr: master, slave, sentinel.
func roleOf(addr string) (string, error) {
	v, err := command(addr, "ROLE")
	if err != nil {
		return "", err
	}
	if a := asList(v); len(a) > 0 {
		return fmt.Sprint(a[0]), nil
	}
	return "", fmt.Errorf("%s: unexpected ROLE reply %v", addr, v)
}

func asList(v any) []any { a, _ := v.([]any); return a }

// pairs turns a flat RESP2 field/value array into a map.
func pairs(v any) map[string]string {
	a := asList(v)
	m := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		m[fmt.Sprint(a[i])] = fmt.Sprint(a[i+1])
	}
	return m
}
