package admin

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// dlqPage is how many entries one XRANGE of a scan reads.
const dlqPage = 500

// dlqCursor pages through one shard's dead-letter stream for scan.
type dlqCursor struct {
	shard int
	key   string
	buf   []redis.XMessage
	start string // XRANGE start of the next page; "" when read to the end
}

// page takes the result of reading the cursor's next page.
func (c *dlqCursor) page(msgs []redis.XMessage) {
	c.buf = msgs
	c.start = ""
	if len(msgs) == dlqPage {
		c.start = "(" + msgs[len(msgs)-1].ID
	}
}

// scan calls fn with each dead letter that passes filter, oldest first,
// until fn returns false. Each shard's stream is in the order its letters
// failed (entries are added as they fail); scan merges the shards' streams
// by failure time (the failed_ms field, stamped with Redis's clock; the
// entry id's time for entries without one), ties going to the lower shard.
// The first pages of every shard come in one pipelined round trip, with
// Redis's TIME; each further page is one XRANGE.
func (q *DeadLetters) scan(ctx context.Context, filter DeadLetterFilter, fn func(DeadLetter) bool) error {
	keys, err := q.Streams(ctx)
	if err != nil {
		return err
	}
	rdb := q.svc.rdb
	pipe := rdb.Pipeline()
	timeCmd := pipe.Time(ctx)
	cursors := make([]*dlqCursor, len(keys))
	first := make([]*redis.XMessageSliceCmd, len(keys))
	for shard, key := range keys {
		cursors[shard] = &dlqCursor{shard: shard, key: key}
		first[shard] = pipe.XRangeN(ctx, key, "-", "+", dlqPage)
	}
	_, _ = pipe.Exec(ctx)
	now, err := timeCmd.Result()
	if err != nil {
		return fmt.Errorf("rpr: read Redis time: %w", err)
	}
	for shard, cmd := range first {
		msgs, err := cmd.Result()
		if err != nil {
			return fmt.Errorf("rpr: read %s: %w", keys[shard], err)
		}
		cursors[shard].page(msgs)
	}
	for {
		var next *dlqCursor
		for _, c := range cursors {
			if len(c.buf) == 0 && c.start != "" {
				msgs, err := rdb.XRangeN(ctx, c.key, c.start, "+", dlqPage).Result()
				if err != nil {
					return fmt.Errorf("rpr: read %s: %w", c.key, err)
				}
				c.page(msgs)
			}
			if len(c.buf) > 0 && (next == nil || failedMillis(c.buf[0]) < failedMillis(next.buf[0])) {
				next = c
			}
		}
		if next == nil {
			return nil
		}
		m := next.buf[0]
		next.buf = next.buf[1:]
		dl := parseDeadLetter(m, next.shard, next.key)
		if filter.matches(&dl, now) && !fn(dl) {
			return nil
		}
	}
}
