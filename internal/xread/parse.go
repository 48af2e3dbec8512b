package xread

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// shareLimit is the size up to which the entries of one reply share one
// copy of it (one allocation for the whole batch). Past it each id, field
// and value is copied on its own, so an entry kept for long (a request
// whose handler is slow, a dead letter) keeps only itself.
const shareLimit = 16 << 10

// ReplyError is an error reply of Redis's (a RESP simple or blob error),
// with its message as Redis sent it ("NOGROUP No such key ...").
type ReplyError struct{ Message string }

func (e ReplyError) Error() string { return e.Message }

// Parse reads a raw RESP2 or RESP3 reply of XREADGROUP (or XREAD) into the
// entries of all its streams, in order. A null reply (the block time
// passed with nothing to read) gives redis.Nil, an error reply a
// ReplyError, anything that is not the reply of a stream read an error
// naming the byte where it went wrong.
func Parse(reply []byte) ([]Entry, error) {
	return parse(reply, nil)
}

// parse is Parse of a reply whose large strings' bodies were read apart
// (see sink.ReadFrom).
func parse(reply []byte, large []largeBody) ([]Entry, error) {
	p := parser{b: reply, large: large}
	if len(reply) <= shareLimit {
		p.shared = string(reply)
	}
	entries, err := p.reply()
	switch {
	case err != nil:
	case p.i != len(p.b):
		err = p.errorf("%d bytes after the reply", len(p.b)-p.i)
	case p.k != len(p.large):
		err = p.errorf("%d strings read apart were not in the reply", len(p.large)-p.k)
	}
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// parser is a cursor over one raw reply.
type parser struct {
	b      []byte
	i      int
	shared string // the reply as one string, when its entries share it

	large []largeBody // bodies of strings not in b, in order
	k     int         // the next of them
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("xread: malformed stream reply at byte %d of %d: %s", p.i, len(p.b), fmt.Sprintf(format, args...))
}

// header reads the type byte and the line after it ("*2", "$5", "_").
func (p *parser) header() (kind byte, line []byte, err error) {
	start := p.i
	for j := start; j+1 < len(p.b); j++ {
		if p.b[j] == '\r' && p.b[j+1] == '\n' {
			if j == start {
				return 0, nil, p.errorf("empty line")
			}
			p.i = j + 2
			return p.b[start], p.b[start+1 : j], nil
		}
	}
	return 0, nil, p.errorf("line without CRLF")
}

// length reads the count of an aggregate or the size of a bulk string;
// -1 (RESP2's null) is returned as is.
func (p *parser) length(line []byte) (int, error) {
	n, err := strconv.Atoi(string(line))
	if err != nil || n < -1 {
		return 0, p.errorf("bad length %q", line)
	}
	return n, nil
}

// str returns bytes [start, end) of the reply as a string: a part of the
// shared copy, or a copy of its own.
func (p *parser) str(start, end int) string {
	if p.shared != "" {
		return p.shared[start:end]
	}
	return string(p.b[start:end])
}

// reply reads the whole reply: null, an error, an array of [stream,
// entries] pairs (RESP2) or a map of stream to entries (RESP3).
func (p *parser) reply() ([]Entry, error) {
	kind, line, err := p.header()
	if err != nil {
		return nil, err
	}
	switch kind {
	case '_':
		return nil, redis.Nil
	case '-':
		return nil, ReplyError{Message: string(line)}
	case '!':
		msg, err := p.bulkBody(line)
		if err != nil {
			return nil, err
		}
		return nil, ReplyError{Message: msg}
	case '*', '%':
	default:
		return nil, p.errorf("reply of type %q, not an array or map", kind)
	}
	n, err := p.length(line)
	switch {
	case err != nil:
		return nil, err
	case n == -1:
		return nil, redis.Nil
	}
	var entries []Entry
	for range n {
		if kind == '*' {
			if err := p.aggregate(2); err != nil {
				return nil, err
			}
		}
		if _, err := p.bulk(); err != nil { // the stream's name
			return nil, err
		}
		if entries, err = p.entries(entries); err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// aggregate reads an array header of exactly n elements.
func (p *parser) aggregate(n int) error {
	kind, line, err := p.header()
	if err != nil {
		return err
	}
	if got, err := p.length(line); kind != '*' || err != nil || got != n {
		return p.errorf("want an array of %d, got %q%s", n, kind, line)
	}
	return nil
}

// count reads an array header and returns its length: 0 for a null.
func (p *parser) count() (int, error) {
	kind, line, err := p.header()
	switch {
	case err != nil:
		return 0, err
	case kind == '_':
		return 0, nil
	case kind != '*':
		return 0, p.errorf("want an array, got %q", kind)
	}
	n, err := p.length(line)
	if n == -1 {
		n = 0
	}
	// Every element takes at least 3 bytes: a larger count is a lie, and
	// must not size an allocation.
	if err == nil && n > (len(p.b)-p.i)/3 {
		err = p.errorf("array of %d elements in %d bytes", n, len(p.b)-p.i)
	}
	return n, err
}

// entries appends the entries of one stream's array to to.
func (p *parser) entries(to []Entry) ([]Entry, error) {
	n, err := p.count()
	if err != nil {
		return nil, err
	}
	if to == nil {
		to = make([]Entry, 0, n)
	}
	fields := make([]string, 0, 2*n) // one field and value each, as rpr writes them
	for range n {
		size, err := p.count()
		if err != nil {
			return nil, err
		}
		if size != 2 && size != 4 { // 4: with XREADGROUP CLAIM's idle time and delivery count
			return nil, p.errorf("entry of %d elements, not 2 or 4", size)
		}
		id, err := p.bulk()
		if err != nil {
			return nil, err
		}
		pairs, err := p.count() // null for an entry deleted since it was delivered
		if err != nil {
			return nil, err
		}
		if pairs%2 != 0 {
			return nil, p.errorf("entry %s has %d field names and values, an odd count", id, pairs)
		}
		start, lentFrom := len(fields), p.k
		for range pairs {
			s, err := p.bulk()
			if err != nil {
				return nil, err
			}
			fields = append(fields, s)
		}
		for range size - 2 {
			if kind, _, err := p.header(); err != nil || kind != ':' {
				return nil, errors.Join(err, p.errorf("want an integer after entry %s", id))
			}
		}
		to = append(to, Entry{ID: id, Fields: fields[start:len(fields):len(fields)], Lent: p.lent(lentFrom)})
	}
	return to, nil
}

// lent lists the lent buffers of the large bodies read since the from'th.
func (p *parser) lent(from int) []*[]byte {
	var lent []*[]byte
	for _, l := range p.large[from:p.k] {
		if l.lent != nil {
			lent = append(lent, l.lent)
		}
	}
	return lent
}

// bulk reads a bulk or simple string.
func (p *parser) bulk() (string, error) {
	kind, line, err := p.header()
	switch {
	case err != nil:
		return "", err
	case kind == '+':
		start := p.i - 2 - len(line)
		return p.str(start, start+len(line)), nil
	case kind != '$':
		return "", p.errorf("want a string, got %q", kind)
	}
	return p.bulkBody(line)
}

// bulkBody reads the bytes of a bulk string (or blob error) whose length
// line was line.
func (p *parser) bulkBody(line []byte) (string, error) {
	n, err := p.length(line)
	if err != nil {
		return "", err
	}
	if p.k < len(p.large) && p.large[p.k].at == p.i {
		body := p.large[p.k].body
		if len(body) != n {
			return "", p.errorf("string of %d bytes read apart as %d", n, len(body))
		}
		p.k++
		return body, nil
	}
	if n < 0 || n > len(p.b)-p.i-2 || p.b[p.i+n] != '\r' || p.b[p.i+n+1] != '\n' {
		return "", p.errorf("string of %d bytes does not fit or end in CRLF", n)
	}
	s := p.str(p.i, p.i+n)
	p.i += n + 2
	return s, nil
}
