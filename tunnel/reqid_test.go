package tunnel

import (
	"strings"
	"testing"
	"time"
)

func TestRequestIDRoundTrip(t *testing.T) {
	now := time.UnixMilli(1795995318695)
	id := newRequestID("ORD1", now)
	if len(id) != requestIDSize {
		t.Fatalf("len(%q) = %d, want %d", id, len(id), requestIDSize)
	}
	got, err := ParseRequestID(id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Biz != "ORD1" || !got.Time.Equal(now) || got.String() != id {
		t.Fatalf("parsed %+v from %q", got, id)
	}
}

func TestRequestIDsAreUniqueAndSortByTime(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for i := range 10000 {
		id := newRequestID("TEST", time.UnixMilli(1795995318695+int64(i/100)))
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
		if id[:27] < prev {
			t.Fatalf("%q sorts before %q", id, prev)
		}
		prev = id[:27]
	}
}

func TestParseRequestIDRejectsBadIDs(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"nonsense", "want DATE-BIZ4-UNIXMS-RANDOM"},
		{"20261129-ord1-1795995318695-X857YZJDH0", "only A-Z and 0-9"},
		{"20261129-ORD-1795995318695-X857YZJDH0", "exactly 4"},
		{"20261128-ORD1-1795995318695-X857YZJDH0", "does not match its time"},
		{"20261129-ORD1-179599531869x-X857YZJDH0", "13 digits"},
		{"20261129-ORD1-1795995318695-X857YZ", "random part"},
		{"20261129-ORD1-1795995318695-X857YZJDHI", "random part"},
	} {
		_, err := ParseRequestID(tc.id)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRequestID(%q) = %v, want an error mentioning %q", tc.id, err, tc.want)
		}
	}
}

func TestBizCodeForService(t *testing.T) {
	for in, want := range map[string]string{
		"examples.greeter.v1.Greeter": "GREE",
		"a.b.Io":                      "IOXX",
		"x.y.v2_S9":                   "V2S9",
	} {
		if got := bizCodeForService(in); got != want {
			t.Errorf("bizCodeForService(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParseRequestID fuzzes ParseRequestID, which also reads the ids
// found in Redis (rpr trace, rpr dlq): no input panics it, a refused id is
// named in the error, and an accepted one is exactly what its String
// writes, so that looking it up finds the same keys.
func FuzzParseRequestID(f *testing.F) {
	f.Add(newRequestID("ORD1", time.UnixMilli(1795995318695)))
	f.Add("20261129-ORD1-1764434400123-K7P2QXM4RT")
	f.Add("19700101-ORD1-0000000000000-K7P2QXM4RT")
	f.Add("20261129-ord1-1764434400123-K7P2QXM4RT")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseRequestID(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "rpr: request id ") {
				t.Fatalf("%q: the error %q does not name the id", s, err)
			}
			return
		}
		if id.String() != s {
			t.Fatalf("%q was accepted, but the id it names is written %q", s, id.String())
		}
		if again, err := ParseRequestID(id.String()); err != nil || !again.Time.Equal(id.Time) || again.Biz != id.Biz || again.Random != id.Random {
			t.Fatalf("%q changed in a round trip: was %+v, now %+v (%v)", s, id, again, err)
		}
	})
}

// appendDate writes what AppendFormat with idDateLayout writes, for every
// day of centuries and for the years the layout writes otherwise.
func TestAppendDateMatchesLayout(t *testing.T) {
	check := func(d time.Time) {
		if got, want := string(appendDate(nil, d)), d.Format(idDateLayout); got != want {
			t.Fatalf("appendDate(%v) = %q; want %q", d, got, want)
		}
	}
	for d := time.Date(1900, 1, 1, 23, 59, 0, 0, time.UTC); d.Year() < 2300; d = d.Add(23 * time.Hour) {
		check(d)
	}
	for _, y := range []int{-1, 0, 9, 999, 9999, 10000, 123456} {
		check(time.Date(y, 12, 31, 0, 0, 0, 0, time.UTC))
	}
}
