package xread

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/rprtunnel/rpr/internal/bufpool"
)

// readMargin is how much longer than its block time go-redis's read
// timeout must let a raw read wait: go-redis's typed blocking commands get
// ten seconds more than their block, a raw command only the client's read
// timeout, and a reply cut off by it loses the entries Redis delivered to
// it until they are reclaimed.
const readMargin = 2 * time.Second

// keepBytes bounds the buffer a Reader keeps between reads. Bodies of
// large strings never enter it (see sink.ReadFrom), so only the framing
// of a batch and its small entries do.
const keepBytes = 1 << 20

// Reader reads one stream, read after read, from one goroutine: a Reader
// must not be used by two at once. Each read (XREADGROUP, or XREAD after
// an id) has go-redis write its raw reply into the Reader's buffer,
// unless it must go through go-redis's typed command (see Read).
type Reader struct {
	rdb  redis.UniversalClient
	keep *redis.Client // set by KeepConn: reads go on conn
	conn *redis.Conn   // the connection kept; nil until a read takes one
	// renewAt is when conn has been kept for keep's ConnMaxLifetime and goes back
	// to the pool before the next read; zero: never.
	renewAt  time.Time
	stream   string
	group    *redis.XReadGroupArgs // nil: XREAD by id
	maxBlock time.Duration         // the longest block a raw read may ask for; < 0: none
	broken   error                 // a raw reply that could not be parsed: typed reads from then on

	sink sink // lends from sink.bodies when set (LendBodies)
	// The raw command's arguments, kept between reads while count, block
	// and the id read after stay the same (boxing them allocates).
	cmdArg []any
	count  int64
	block  time.Duration
	after  string
}

// NewReader returns a Reader of the new entries of stream for consumer
// of group (Read). With noAck they are not added to the group's pending
// list (XREADGROUP NOACK).
func NewReader(rdb redis.UniversalClient, group, consumer, stream string, noAck bool) *Reader {
	return &Reader{
		rdb:      rdb,
		stream:   stream,
		group:    &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, ">"}, NoAck: noAck},
		maxBlock: maxRawBlock(rdb),
	}
}

// NewStreamReader returns a Reader of stream by id, without a consumer
// group (ReadAfter).
func NewStreamReader(rdb redis.UniversalClient, stream string) *Reader {
	return &Reader{rdb: rdb, stream: stream, maxBlock: maxRawBlock(rdb)}
}

// maxRawBlock is the longest block rdb's read timeout lets a raw read
// wait for: unlimited without a read timeout, none for a client whose
// options it cannot see.
func maxRawBlock(rdb redis.UniversalClient) time.Duration {
	var timeout time.Duration
	switch c := rdb.(type) {
	case interface{ Options() *redis.Options }:
		timeout = c.Options().ReadTimeout
	case interface{ Options() *redis.ClusterOptions }:
		timeout = c.Options().ReadTimeout
	default:
		return -1
	}
	if timeout <= 0 { // go-redis's normalized "no deadline"
		return math.MaxInt64
	}
	return timeout - readMargin
}

// KeepConn has the Reader send its reads on a connection of its own,
// taken from rdb's pool by the first read and kept from read to read
// until Close, when rdb is a *redis.Client (a Sentinel failover client
// is one too); a Cluster's reads go through the client, which picks the
// node. go-redis checks every connection it takes from its pool with a
// system call (a peek for a closed socket) before each command: for a
// reader that reads all the time, a connection taken once is checked
// once. A read that fails with anything but redis.Nil gives its
// connection back (go-redis closes a broken one) and the next read takes
// another. With the client's ConnMaxLifetime set, the connection also
// goes back once kept that long, for the pool to retire when it is due.
//
// The Reader holds the connection between reads too, so its owner must
// count it as one connection of the pool's for as long as it reads.
func (r *Reader) KeepConn() {
	if c, ok := r.rdb.(*redis.Client); ok {
		r.keep = c
	}
}

// Close gives back the connection the Reader kept (KeepConn), if any; a
// later read takes a new one.
func (r *Reader) Close() {
	if r.conn != nil {
		_ = r.conn.Close() // nothing to do about a connection that would not close
		r.conn = nil
	}
}

// commander is what a read is sent through: the client, or the
// connection the Reader keeps.
type commander interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd
	XRead(ctx context.Context, a *redis.XReadArgs) *redis.XStreamSliceCmd
}

// via returns what the next read goes through.
func (r *Reader) via() commander {
	if r.keep == nil {
		return r.rdb
	}
	if r.conn != nil && !r.renewAt.IsZero() && time.Now().After(r.renewAt) {
		r.Close()
	}
	if r.conn == nil {
		r.conn = r.keep.Conn()
		if life := r.keep.Options().ConnMaxLifetime; life > 0 {
			r.renewAt = time.Now().Add(life)
		}
	}
	return r.conn
}

// settle gives back the kept connection after a read that failed with
// err, unless err says only that nothing came.
func (r *Reader) settle(err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		r.Close()
	}
}

// LendBodies has the Reader read each value over 16 KiB into a buffer of
// bodies instead of an allocation of its own, and list it in its entry's
// Lent. Whoever is done with every value of such an entry (and with all
// it shares: strings cut from it, slices of it) gives its Lent back with
// bodies.Put, so that the next large value reuses the memory; a buffer
// never given back is collected as any garbage. Only raw reads lend:
// entries of a typed read have no Lent.
func (r *Reader) LendBodies(bodies *bufpool.Pool) { r.sink.bodies = bodies }

// MaxRawBlock is the longest block time a read is served from a raw
// reply; longer blocks go through go-redis's typed command. It is
// negative when none is.
func (r *Reader) MaxRawBlock() time.Duration {
	if r.broken != nil {
		return -1
	}
	return r.maxBlock
}

// Read reads up to count new entries through the Reader's consumer group,
// waiting up to block for the first. When none came within block it
// returns redis.Nil, as go-redis does. A block longer than MaxRawBlock,
// and a read Redis answered with an error (a missing group, a Cluster
// redirect go-redis follows), go through go-redis's typed XREADGROUP, so
// that they behave exactly as it does.
func (r *Reader) Read(ctx context.Context, count int64, block time.Duration) ([]Entry, error) {
	return r.read(ctx, count, block, ">")
}

// ReadAfter is Read for a Reader made by NewStreamReader: up to count
// entries after id, through XREAD.
func (r *Reader) ReadAfter(ctx context.Context, id string, count int64, block time.Duration) ([]Entry, error) {
	return r.read(ctx, count, block, id)
}

func (r *Reader) read(ctx context.Context, count int64, block time.Duration, after string) ([]Entry, error) {
	if block > r.MaxRawBlock() {
		return r.readTyped(ctx, count, block, after)
	}
	r.sink.reset()
	cmd := redis.NewRawWriteToCmd(ctx, &r.sink, r.rawArgs(count, block, after)...)
	cmd.SetFirstKeyPos(int8(len(r.cmdArg) - 2))
	err := r.via().Process(ctx, cmd)
	r.settle(err)
	if err != nil {
		return nil, err
	}
	entries, err := parse(r.sink.buf, r.sink.large)
	var refused ReplyError
	switch {
	case err == nil, errors.Is(err, redis.Nil):
		return entries, err
	case errors.As(err, &refused):
		return r.readTyped(ctx, count, block, after)
	}
	// Redis's reply is not one Parse knows: what it delivered stays in
	// the pending list (or in the stream) for the caller to recover, and
	// later reads take go-redis's path.
	r.broken = err
	return nil, fmt.Errorf("xread: %s: unreadable raw reply (later reads use go-redis's): %w", r.stream, err)
}

// readTyped is a read through go-redis's XReadGroup or XRead.
func (r *Reader) readTyped(ctx context.Context, count int64, block time.Duration, after string) ([]Entry, error) {
	var streams []redis.XStream
	var err error
	if r.group != nil {
		args := *r.group
		args.Count, args.Block = count, block
		streams, err = r.via().XReadGroup(ctx, &args).Result()
	} else {
		streams, err = r.via().XRead(ctx, &redis.XReadArgs{Streams: []string{r.stream, after}, Count: count, Block: block}).Result()
	}
	r.settle(err)
	if err != nil {
		return nil, err
	}
	var entries []Entry
	for _, s := range streams {
		entries = append(entries, FromMessages(s.Messages)...)
	}
	return entries, nil
}

// rawArgs returns the arguments of the raw read, built again only when
// count, block or after changed.
func (r *Reader) rawArgs(count int64, block time.Duration, after string) []any {
	if r.cmdArg != nil && count == r.count && block == r.block && after == r.after {
		return r.cmdArg
	}
	r.count, r.block, r.after = count, block, after
	var args []any
	if r.group != nil {
		args = []any{"xreadgroup", "group", r.group.Group, r.group.Consumer}
	} else {
		args = []any{"xread"}
	}
	if count > 0 {
		args = append(args, "count", count)
	}
	args = append(args, "block", int64(block/time.Millisecond))
	if r.group != nil && r.group.NoAck {
		args = append(args, "noack")
	}
	r.cmdArg = append(args, "streams", r.stream, after)
	return r.cmdArg
}

// sink is where go-redis writes a raw reply: its framing and small
// strings into buf, the body of each large string into one allocation of
// its own, so that a large payload is copied once, from go-redis's read
// buffer to where its entry keeps it.
type sink struct {
	buf    []byte
	large  []largeBody
	bodies *bufpool.Pool // where large bodies are taken from; nil: allocated
}

// largeBody is the body of a string read apart from buf: at is where it
// would have started in buf, lent the buffer of sink.bodies it is in (nil
// when allocated).
type largeBody struct {
	at   int
	body string
	lent *[]byte
}

func (s *sink) reset() {
	if cap(s.buf) > keepBytes {
		s.buf = nil
	}
	s.buf = s.buf[:0]
	clear(s.large)
	s.large = s.large[:0]
}

// readLarge reads a large string's body and its CRLF from lr into a
// buffer of its own, lent by s.bodies when it is set.
func (s *sink) readLarge(lr *io.LimitedReader) (int64, error) {
	size := int(lr.N - 2)
	var lent *[]byte
	var body []byte
	if s.bodies != nil {
		lent = s.bodies.Get(size)
		body = (*lent)[:size]
	} else {
		body = make([]byte, size)
	}
	n, err := io.ReadFull(lr, body)
	var crlf [2]byte
	m := 0
	if err == nil {
		m, err = io.ReadFull(lr, crlf[:])
	}
	if err != nil || crlf != [2]byte{'\r', '\n'} {
		// Cut short, or not a string's body after all: keep the bytes as
		// they came.
		s.buf = append(append(s.buf, body[:n]...), crlf[:m]...)
		if lent != nil {
			s.bodies.Put(lent)
		}
		return int64(n + m), err
	}
	s.large = append(s.large, largeBody{at: len(s.buf), body: unsafe.String(unsafe.SliceData(body), len(body)), lent: lent})
	return int64(n + m), nil
}

func (s *sink) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	return len(p), nil
}

// ReadFrom is how go-redis hands over each string's body: it copies the
// body and its CRLF with io.CopyN, which ends here. A body over
// shareLimit is read into a buffer of exactly its size; anything else is
// appended to buf.
func (s *sink) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok && lr.N-2 > shareLimit {
		return s.readLarge(lr)
	}
	if lr, ok := r.(*io.LimitedReader); ok {
		s.buf = slices.Grow(s.buf, int(lr.N))
	}
	var total int64
	for {
		if len(s.buf) == cap(s.buf) {
			s.buf = append(s.buf, 0)[:len(s.buf)]
		}
		n, err := r.Read(s.buf[len(s.buf):cap(s.buf)])
		s.buf = s.buf[:len(s.buf)+n]
		total += int64(n)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
