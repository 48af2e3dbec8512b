package redistest

// Faults of a Cluster: crash a node, bring it back, wait for a failover.

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Kill sends SIGKILL to the node at addr (a crash) and waits until the
// process is gone. Killing a master makes its replica take over after about
// two node timeouts; WaitFailover waits for that.
func (c *Cluster) Kill(addr string) {
	n := c.byAddr[addr]
	if n == nil {
		panic(fmt.Sprintf("redistest: %s is not a node of this cluster (%s)", addr, strings.Join(c.Addrs(), ",")))
	}
	_, _ = c.liveView() // note what addr serves, for WaitFailover
	n.Kill()
}

// Start starts the node at addr again (after Kill or Node(addr).Stop) on
// the same port and in the same directory; its nodes.conf makes it rejoin
// the cluster (a former master as a replica of the node that replaced it).
// Start returns once the process answers; WaitHealthy waits until it has
// rejoined. A running node is stopped first.
func (c *Cluster) Start(tb testing.TB, addr string) {
	tb.Helper()
	n := c.byAddr[addr]
	if n == nil {
		tb.Fatalf("redistest: %s is not a node of this cluster (%s)", addr, strings.Join(c.Addrs(), ","))
	}
	n.Restart(tb)
}

// WaitFailover waits until the slots that oldMaster served have moved to
// another running node and returns that node's address. Done means: every
// running node (oldMaster excluded) reports cluster_state:ok and names the
// same new owner, the owner answers ROLE with master, and a SET of a key in
// one of those slots, sent straight to it, succeeds. It fails tb after
// timeout, or at once if oldMaster is not known to have served slots.
func (c *Cluster) WaitFailover(tb testing.TB, oldMaster string, timeout time.Duration) string {
	tb.Helper()
	if c.byAddr[oldMaster] == nil {
		tb.Fatalf("redistest: %s is not a node of this cluster (%s)", oldMaster, strings.Join(c.Addrs(), ","))
	}
	_, _ = c.liveView()
	c.mu.Lock()
	ranges := c.slots[oldMaster]
	c.mu.Unlock()
	if len(ranges) == 0 {
		tb.Fatalf("redistest: WaitFailover(%s): that node was never seen serving slots; is it a master?", oldMaster)
	}
	slot := ranges[0][0]
	key := KeyInSlot(slot)
	var newMaster string
	err := poll(time.Now().Add(timeout), func() error {
		owner := ""
		for _, n := range c.nodes {
			if n.Addr() == oldMaster || !n.Running() {
				continue
			}
			replies, err := commands(n.Addr(), []string{"CLUSTER", "INFO"}, []string{"CLUSTER", "NODES"})
			if err != nil {
				return err
			}
			if st := infoField(fmt.Sprint(replies[0]), "cluster_state"); st != "ok" {
				return fmt.Errorf("%s: cluster_state:%s", n.Addr(), st)
			}
			e := ownerOf(parseClusterNodes(fmt.Sprint(replies[1])), slot)
			switch {
			case e == nil:
				return fmt.Errorf("%s: slot %d has no owner", n.Addr(), slot)
			case e.addr == oldMaster:
				return fmt.Errorf("%s: slot %d is still served by %s", n.Addr(), slot, oldMaster)
			case owner != "" && e.addr != owner:
				return fmt.Errorf("nodes disagree on slot %d: %s and %s", slot, owner, e.addr)
			}
			owner = e.addr
		}
		if owner == "" || c.byAddr[owner] == nil || !c.byAddr[owner].Running() {
			return fmt.Errorf("slot %d: new owner %q is not a running node", slot, owner)
		}
		role, err := command(owner, "ROLE")
		if err != nil {
			return err
		}
		if r, _ := role.([]any); len(r) == 0 || r[0] != "master" {
			return fmt.Errorf("%s: ROLE %v", owner, role)
		}
		if err := expectOK(owner, "SET", key, "redistest"); err != nil {
			return err
		}
		newMaster = owner
		return nil
	})
	if err != nil {
		tb.Fatalf("redistest: no failover of %s within %v: %v", oldMaster, timeout, err)
	}
	_, _ = c.liveView()
	return newMaster
}

// logState logs, for a failed test, one node's view of the cluster and the
// end of every node's log.
func (c *Cluster) logState(tb testing.TB) {
	for _, n := range c.nodes {
		if n.Running() {
			if v, err := command(n.Addr(), "CLUSTER", "NODES"); err == nil {
				tb.Logf("redistest: CLUSTER NODES at %s:\n%v", n.Addr(), v)
				break
			}
		}
	}
	for _, n := range c.nodes {
		tb.Logf("redistest: end of %s (%s):\n%s", n.LogPath(), n.Addr(), n.logTail(10))
	}
}
