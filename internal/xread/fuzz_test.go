package xread

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Parse reads what a Redis reply could be without panicking, and what it
// accepts is whole: every entry has an id and its fields in pairs.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"*-1\r\n",
		"_\r\n",
		"-NOGROUP No such key\r\n",
		"!9\r\nMOVED 1 x\r\n",
		"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\ne\r\n$5\r\nhello\r\n",
		"%1\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n_\r\n",
		"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*4\r\n$3\r\n1-0\r\n*2\r\n+e\r\n+v\r\n:12\r\n:1\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, reply []byte) {
		entries, err := Parse(reply)
		var refused ReplyError
		switch {
		case errors.Is(err, redis.Nil), errors.As(err, &refused):
			if entries != nil {
				t.Fatalf("entries beside %v", err)
			}
		case err != nil:
			if entries != nil {
				t.Fatalf("entries beside the error %v", err)
			}
		default:
			for _, e := range entries {
				if len(e.Fields)%2 != 0 {
					t.Fatalf("entry %q has an odd number of fields and values", e.ID)
				}
			}
		}
	})
}
