package xread

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestParseShapes(t *testing.T) {
	two := []Entry{
		{ID: "1-0", Fields: []string{"e", "hello"}},
		{ID: "1-1", Fields: []string{"e", "", "x", "y"}},
	}
	for _, tc := range []struct {
		name  string
		reply string
		want  []Entry
		err   error
	}{
		{"RESP2 null", "*-1\r\n", nil, redis.Nil},
		{"RESP3 null", "_\r\n", nil, redis.Nil},
		{"RESP2 array of streams", "*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\ne\r\n$5\r\nhello\r\n*2\r\n$3\r\n1-1\r\n*4\r\n$1\r\ne\r\n$0\r\n\r\n$1\r\nx\r\n$1\r\ny\r\n", two, nil},
		{"RESP3 map of streams", "%1\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\ne\r\n$5\r\nhello\r\n*2\r\n$3\r\n1-1\r\n*4\r\n$1\r\ne\r\n$0\r\n\r\n+x\r\n+y\r\n", two, nil},
		{"deleted entry", "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*-1\r\n", []Entry{{ID: "1-0", Fields: []string{}}}, nil},
		{"RESP3 deleted entry", "%1\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n_\r\n", []Entry{{ID: "1-0", Fields: []string{}}}, nil},
		{"entry with claim metadata", "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*4\r\n$3\r\n1-0\r\n*2\r\n$1\r\ne\r\n$1\r\nv\r\n:12\r\n:1\r\n", []Entry{{ID: "1-0", Fields: []string{"e", "v"}}}, nil},
		{"two streams", "*2\r\n*2\r\n$1\r\na\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*0\r\n*2\r\n$1\r\nb\r\n*1\r\n*2\r\n$3\r\n2-0\r\n*0\r\n", []Entry{{ID: "1-0", Fields: []string{}}, {ID: "2-0", Fields: []string{}}}, nil},
		{"simple error", "-NOGROUP No such key 's'\r\n", nil, ReplyError{Message: "NOGROUP No such key 's'"}},
		{"blob error", "!9\r\nMOVED 1 x\r\n", nil, ReplyError{Message: "MOVED 1 x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.reply))
			if !reflect.DeepEqual(err, tc.err) && !(tc.err == redis.Nil && err == redis.Nil) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("entries %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Every malformed reply is an error naming where it went wrong, never a
// panic or a partial result.
func TestParseRefusesMalformed(t *testing.T) {
	good := "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\ne\r\n$5\r\nhello\r\n"
	cases := map[string]string{
		"empty":            "",
		"no CRLF":          "*1",
		"integer reply":    ":1\r\n",
		"bad count":        "*x\r\n",
		"negative count":   "*-2\r\n",
		"huge count":       "*1\r\n*2\r\n$1\r\ns\r\n*99999999\r\n",
		"odd fields":       "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*1\r\n$1\r\ne\r\n",
		"entry of 3":       "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*3\r\n$3\r\n1-0\r\n*0\r\n:1\r\n",
		"string too long":  "*1\r\n*2\r\n$9\r\ns\r\n",
		"string no CRLF":   "*1\r\n*2\r\n$1\r\nsXX",
		"stream not array": "*1\r\n$1\r\ns\r\n",
		"trailing bytes":   good + "+OK\r\n",
		"claim not ints":   "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*4\r\n$3\r\n1-0\r\n*0\r\n$1\r\nx\r\n:1\r\n",
	}
	for i := range len(good) - 1 {
		cases[fmt.Sprintf("cut at %d", i)] = good[:i]
	}
	for name, reply := range cases {
		entries, err := Parse([]byte(reply))
		if err == nil || errors.Is(err, redis.Nil) || entries != nil {
			t.Errorf("%s: Parse(%q) = %+v, %v; want an error", name, reply, entries, err)
			continue
		}
		var refused ReplyError
		if errors.As(err, &refused) || !strings.Contains(err.Error(), "malformed stream reply at byte") {
			t.Errorf("%s: error %q does not say where the reply is malformed", name, err)
		}
	}
}

// A small reply's entries share one copy of it: a batch of 64 costs the
// copy, the entries and their fields, whatever its size.
func TestParseAllocatesPerBatch(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "*1\r\n*2\r\n$1\r\ns\r\n*64\r\n")
	for i := range 64 {
		id := fmt.Sprintf("1700000000000-%d", i)
		fmt.Fprintf(&b, "*2\r\n$%d\r\n%s\r\n*2\r\n$1\r\ne\r\n$32\r\n%032d\r\n", len(id), id, i)
	}
	reply := []byte(b.String())
	allocs := testing.AllocsPerRun(100, func() {
		entries, err := Parse(reply)
		if err != nil || len(entries) != 64 {
			t.Fatalf("Parse: %d entries, %v", len(entries), err)
		}
	})
	if allocs > 3 {
		t.Fatalf("Parse of 64 entries: %.0f allocations, want at most 3", allocs)
	}
}

// Entries of a large reply do not share its memory: each string is its
// own copy, so keeping one entry keeps only it.
func TestParseLargeReplyCopiesEachString(t *testing.T) {
	payload := strings.Repeat("p", shareLimit)
	reply := []byte(fmt.Sprintf("*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\ne\r\n$%d\r\n%s\r\n", len(payload), payload))
	entries, err := Parse(reply)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reply {
		reply[i] = 'X' // the entries must not see it
	}
	if got, _ := entries[0].Value("e"); got != payload || entries[0].ID != "1-0" {
		t.Fatalf("entry changed with the reply buffer: id %q, %d bytes", entries[0].ID, len(got))
	}
}

func TestValueTakesTheLastOfARepeatedField(t *testing.T) {
	e := Entry{ID: "1-0", Fields: []string{"e", "first", "x", "1", "e", "last"}}
	if v, ok := e.Value("e"); !ok || v != "last" {
		t.Fatalf("Value(e) = %q, %v; want last", v, ok)
	}
	if _, ok := e.Value("missing"); ok {
		t.Fatal("Value of a missing field reported present")
	}
}
