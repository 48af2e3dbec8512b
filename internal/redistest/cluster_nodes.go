package redistest

// Reading a Cluster's state (CLUSTER NODES), hash slots, and the raw
// commands the harness sends to one node.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// nodeEntry is one line of CLUSTER NODES.
type nodeEntry struct {
	id       string
	addr     string // "127.0.0.1:PORT" (the bus port and hostname are cut)
	flags    []string
	masterID string // "-" for a master
	slots    [][2]int
}

func (e *nodeEntry) has(flag string) bool { return slices.Contains(e.flags, flag) }

func clusterView(addr string) ([]nodeEntry, error) {
	v, err := command(addr, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	return parseClusterNodes(fmt.Sprint(v)), nil
}

// parseClusterNodes parses CLUSTER NODES: "<id> <ip:port@cport[,hostname]>
// <flags> <master> <ping-sent> <pong-recv> <epoch> <link> <slot>...".
// Slots being migrated ("[5-<-id]") are skipped.
func parseClusterNodes(text string) []nodeEntry {
	var out []nodeEntry
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		e := nodeEntry{id: f[0], flags: strings.Split(f[2], ","), masterID: f[3]}
		e.addr, _, _ = strings.Cut(f[1], "@")
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil {
				e.slots = append(e.slots, [2]int{l, h})
			}
		}
		out = append(out, e)
	}
	return out
}

// ownerOf returns the entry that serves slot in view, or nil.
func ownerOf(view []nodeEntry, slot int) *nodeEntry {
	for i, e := range view {
		for _, r := range e.slots {
			if r[0] <= slot && slot <= r[1] {
				return &view[i]
			}
		}
	}
	return nil
}

// poll calls check until it returns nil or deadline passes, and then
// returns check's last error.
func poll(deadline time.Time, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(pollInterval)
	}
}

// Slot returns the Redis Cluster hash slot of key (CRC16 of the key, or of
// its {hash tag}, modulo 16384), as CLUSTER KEYSLOT would.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % clusterSlots)
}

// KeyInSlot returns a key ("redistest:N") that hashes to slot.
func KeyInSlot(slot int) string {
	for i := 0; ; i++ {
		if k := "redistest:" + strconv.Itoa(i); Slot(k) == slot {
			return k
		}
	}
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Pseudo-directives carry options of StartSentinel through Option, whose
// config only knows redis.conf lines. They are taken out before a node's
// redis.conf is written (Start would pass them on, and redis-server would
// refuse to start with "Bad directive").
const pseudoPrefix = "redistest:"

// dataDirectives returns directives without the pseudo-directives.
func dataDirectives(ds [][2]string) [][2]string {
	return slices.DeleteFunc(slices.Clone(ds), func(d [2]string) bool { return strings.HasPrefix(d[0], pseudoPrefix) })
}

// pseudo returns the last value of the pseudo-directive name, or def.
func pseudo(ds [][2]string, name, def string) string {
	for _, d := range ds {
		if d[0] == pseudoPrefix+name {
			def = d[1]
		}
	}
	return def
}

// command sends one command to addr and returns its reply.
func command(addr string, args ...string) (any, error) {
	r, err := commands(addr, args)
	if err != nil {
		return nil, err
	}
	return r[0], nil
}

// expectOK runs one command and fails unless the reply is +OK.
func expectOK(addr string, args ...string) error {
	r, err := command(addr, args...)
	if err != nil {
		return err
	}
	if r != "OK" {
		return fmt.Errorf("%s: %s: reply %v, want OK", addr, strings.Join(args, " "), r)
	}
	return nil
}

// commands sends cmds to addr, pipelined, and returns their replies in
// order, as go-redis gives RESP2 replies: string (simple and bulk strings),
// int64, []any and nil. An error reply of any command fails the whole call
// (errors.As finds a redis.Error). Each call has a client of its own that
// dials once and never retries: a poll must see each attempt's own result,
// not a pool's retries and backoff.
func commands(addr string, cmds ...[]string) ([]any, error) {
	rdb := redis.NewClient(&redis.Options{
		Addr:            addr,
		Protocol:        2, // flat field/value arrays (SENTINEL MASTER), as pairs expects
		DisableIdentity: true,
		PoolSize:        1,
		MaxRetries:      -1,
		DialerRetries:   1,
		DialTimeout:     time.Second,
		ReadTimeout:     3 * time.Second,
		WriteTimeout:    3 * time.Second,
	})
	defer rdb.Close()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	sent := make([]*redis.Cmd, len(cmds))
	for i, args := range cmds {
		a := make([]any, len(args))
		for j, s := range args {
			a[j] = s
		}
		sent[i] = pipe.Do(ctx, a...)
	}
	_, _ = pipe.Exec(ctx) // each command's own error is looked at below
	out := make([]any, len(cmds))
	for i, c := range sent {
		v, err := c.Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, fmt.Errorf("%s: %s: %w", addr, strings.Join(cmds[i], " "), err)
		default:
			out[i] = v
		}
	}
	return out, nil
}
