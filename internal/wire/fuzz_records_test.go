package wire

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The fuzz targets of the records and rules rpr keeps in Redis as JSON or
// as the fields of a stream entry: worker records, finished records,
// handoff messages, dead letters, rate-limit rules and routing tables,
// and the form of a routing rule `rpr routes set` reads.
// Each checks what the envelope targets check (fuzz_test.go): no panic, a
// round trip that keeps the value, and errors that name the problem.

// fuzzService is the service the rules are read for.
const fuzzService = "pkg.Svc"

// FuzzParseWorker fuzzes ParseWorker and what reads a record's fields.
func FuzzParseWorker(f *testing.F) {
	for _, w := range []Worker{
		{Host: "h1", PID: 42, Started: 1795995318695, BeatMs: 1795995319695, Lane: "v2", Shards: []int{0, 3},
			Methods: []string{"SayHello"}, Schema: SchemaID([]byte("set")), RetentionMs: 60000},
		{Host: "h2", PID: 1, Started: 1},
		{BeatMs: math.MinInt64},
	} {
		raw, _ := json.Marshal(w)
		f.Add(string(raw))
	}
	f.Add(`{"host":"h","pid":1,"started_ms":1,"future":"field"}`)
	f.Add(`{"methods":[]}`)
	f.Fuzz(func(t *testing.T, raw string) {
		w, ok := ParseWorker(raw)
		if !ok {
			return
		}
		const now = 1795995318695
		if w.LiveAt(now) && w.BeatMs < now-LiveWindow.Milliseconds() {
			t.Fatalf("%q: a worker whose last beat is at %d counts as live at %d", raw, w.BeatMs, int64(now))
		}
		w.Serves("M")
		again, ok := ParseWorker(string(mustJSON(t, w)))
		// An empty list is written as none: records carry a list only
		// when it has something in it.
		if len(w.Shards) == 0 {
			w.Shards = nil
		}
		if len(w.Methods) == 0 {
			w.Methods = nil
		}
		if !ok || !reflect.DeepEqual(again, w) {
			t.Fatalf("%q changed in a round trip: was %+v, now %+v (%v)", raw, w, again, ok)
		}
	})
}

// FuzzParseFinished fuzzes ParseFinished.
func FuzzParseFinished(f *testing.F) {
	f.Add(string(Finished{Method: "SayHello", Worker: "w1", Code: 5, Message: "not found", StartedMs: 10, DoneMs: 12, Bytes: 42}.Encode()))
	f.Add(string(Finished{Key: "order-1"}.Encode()))
	f.Add(`{"method":"M","bytes":3,"cpu_us":7,"spans":["a"]}`)
	f.Fuzz(func(t *testing.T, raw string) {
		rec, ok := ParseFinished(raw)
		if !ok {
			return
		}
		if again, ok := ParseFinished(string(rec.Encode())); !ok || again != rec {
			t.Fatalf("%q changed in a round trip: was %+v, now %+v (%v)", raw, rec, again, ok)
		}
		if cut := CutMessage(rec.Message); len(cut) > MaxFinishedMessage {
			t.Fatalf("CutMessage left %d bytes", len(cut))
		}
	})
}

// FuzzParseHandoff fuzzes ParseHandoff.
func FuzzParseHandoff(f *testing.F) {
	f.Add(string(mustJSON(f, Handoff{To: "w2", Stream: "rpr:v1:{s.S}:q", Entry: "1795995318695-0", Hops: 1})))
	f.Add(`{"to":"w2","stream":"s","entry":"1-0","hops":0}`)
	f.Fuzz(func(t *testing.T, raw string) {
		h, err := ParseHandoff(raw)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "malformed handoff") {
				t.Fatalf("%q: the error %q does not say it is a handoff that is wrong", raw, err)
			}
			return
		}
		if h.To == "" || h.Stream == "" || h.Entry == "" || h.Hops < 1 {
			t.Fatalf("%q: accepted an incomplete handoff %+v", raw, h)
		}
		if again, err := ParseHandoff(string(mustJSON(t, h))); err != nil || again != h {
			t.Fatalf("%q changed in a round trip: was %+v, now %+v (%v)", raw, h, again, err)
		}
	})
}

// FuzzParseDeadLetter fuzzes ParseDeadLetter with an entry whose fields
// hold any strings.
func FuzzParseDeadLetter(f *testing.F) {
	f.Add("attempts exhausted", "UNAVAILABLE", "upstream down", "20261129-TEST-1795995318695-AAAAAAAAAA", "order-1", "s.S/M", "3", "0", "1795995318695", "w1", "default")
	f.Add("", "", "", "", "", "", "x", "-1", "99999999999999999999", "", "")
	f.Fuzz(func(t *testing.T, reason, code, msg, id, key, method, attempts, replays, enqueued, worker, lane string) {
		values := map[string]any{DLReason: reason, DLCode: code, DLError: msg, DLID: id, DLKey: key, DLMethod: method,
			DLAttempts: attempts, DLReplays: replays, DLEnqueuedMs: enqueued, DLWorker: worker, DLLane: lane}
		d := ParseDeadLetter(values)
		pairs := d.Pairs()
		again := map[string]any{}
		for i := 0; i < len(pairs); i += 2 {
			again[pairs[i]] = pairs[i+1]
		}
		if got := ParseDeadLetter(again); got != d {
			t.Fatalf("%v changed in a round trip: was %+v, now %+v", values, d, got)
		}
	})
}

// FuzzParseLimitRule fuzzes ParseLimitRule, as clients and `rpr limits`
// read a field of a limits hash.
func FuzzParseLimitRule(f *testing.F) {
	for _, r := range []LimitRule{
		{Name: "free-search", Method: fuzzService + "/Search", Tier: "free", Limit: 10, Window: time.Second, Algorithm: LimitLog},
		{Name: "vip", Method: "*", Tier: "vip", Limit: 1000, Window: time.Second, Algorithm: LimitGCRA, Burst: 100},
		{Name: "short", Method: "Search", Limit: 1, Window: time.Millisecond},
	} {
		f.Add(r.Name, string(mustJSON(f, r)))
	}
	f.Add("bad", `{"method":"*","tier":"*","limit":100,"window":"forever","algorithm":"log"}`)
	f.Add("x", `{"method":"other.Svc/M","tier":"*","limit":1,"window":"1s","zz":1}`)
	f.Fuzz(func(t *testing.T, name, raw string) {
		r, err := ParseLimitRule(fuzzService, name, raw)
		if err != nil {
			var re *LimitRuleError
			if !errors.As(err, &re) && !strings.HasPrefix(err.Error(), "not a rule (") {
				t.Fatalf("%q: the error %q names no field of the rule", raw, err)
			}
			return
		}
		_ = r.String()
		again, err := ParseLimitRule(fuzzService, r.Name, string(mustJSON(t, r)))
		if err != nil || again != r {
			t.Fatalf("%q changed in a round trip: was %+v, now %+v (%v)", raw, r, again, err)
		}
	})
}

// FuzzParseRouteTable fuzzes ParseRouteTable with a routes hash of one
// field, and what a caller does with the rules it accepts.
func FuzzParseRouteTable(f *testing.F) {
	rules := []RouteRule{
		{Match: map[string]string{"x-canary": "true"}, Lanes: []LaneWeight{{Lane: "v2", Weight: 1}}},
		{Lanes: []LaneWeight{{Lane: "v1", Weight: 90}, {Lane: "v2", Weight: 10}}},
	}
	f.Add(fuzzService+"/*", string(mustJSON(f, rules)))
	f.Add(fuzzService+"/Search", `[{"lanes":[{"lane":"a","weight":0},{"lane":"b","weight":9223372036854775807},{"lane":"c","weight":1}]}]`)
	f.Add("other.Svc/M", `[]`)
	f.Add(fuzzService+"/*", `[{"match":{"tenant":"a,b","x":" \"q\"\t"},"lanes":[{"lane":"v2","weight":1}]}]`)
	f.Fuzz(func(t *testing.T, pattern, raw string) {
		table, errs := ParseRouteTable(fuzzService, map[string]string{pattern: raw})
		for _, err := range errs {
			if !strings.HasPrefix(err.Error(), "route pattern ") && !strings.HasPrefix(err.Error(), "route "+pattern+": ") {
				t.Fatalf("%q: the error %q does not name the route", pattern, err)
			}
		}
		rules, ok := table[pattern]
		if !ok {
			return
		}
		for _, r := range rules {
			for _, roll := range []float64{0, 0.5, math.Nextafter(1, 0)} {
				lane := r.Pick(roll)
				for _, lw := range r.Lanes {
					if lw.Lane == lane && lw.Weight <= 0 {
						t.Fatalf("%q: roll %v picked lane %q, whose weight is %d", raw, roll, lane, lw.Weight)
					}
				}
			}
		}
		for _, r := range rules {
			back, err := ParseRouteRule(r.String())
			if err != nil || !maps.Equal(back.Match, r.Match) {
				t.Fatalf("%q: rule %+v is written %q, which reads as %+v (%v)", raw, r, r.String(), back, err)
			}
		}
		_, _, _ = table.Resolve(fuzzService, "Search", Metadata{"x-canary": {"true"}})
		_ = table.Lanes()
		again, errs := ParseRouteTable(fuzzService, map[string]string{pattern: string(mustJSON(t, rules))})
		for i := range rules {
			if len(rules[i].Match) == 0 {
				rules[i].Match = nil // written as none
			}
		}
		if len(errs) > 0 || !reflect.DeepEqual(again[pattern], rules) {
			t.Fatalf("%q changed in a round trip: was %+v, now %+v (%v)", raw, rules, again[pattern], errs)
		}
	})
}

// FuzzParseRouteRule fuzzes ParseRouteRule, which reads the rules `rpr
// routes set` writes to a routes hash: no spec panics it, a refused spec
// is named in the error, and an accepted rule reads back from its String
// the same (a rule of one lane is written without its weight, which does
// not matter: one lane takes every call).
func FuzzParseRouteRule(f *testing.F) {
	for _, spec := range []string{
		"v2", "v1:90,v2:10", "x-canary=true => v2", "tenant=acme,x-beta=1 => v2:50,default:50",
		"k== => v", "v1:0,v2:1000000", "=> v2", "x=1", "v1:-1", "V2", "a:9223372036854775807,b:1",
	} {
		f.Add(spec)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		r, err := ParseRouteRule(spec)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "route rule ") {
				t.Fatalf("%q: the error %q does not name the rule", spec, err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("%q: accepted a rule that does not validate: %v", spec, err)
		}
		again, err := ParseRouteRule(r.String())
		if err != nil {
			t.Fatalf("%q reads as %q, which does not read: %v", spec, r.String(), err)
		}
		same := maps.Equal(r.Match, again.Match) && len(r.Lanes) == len(again.Lanes)
		for i := 0; same && i < len(r.Lanes); i++ {
			same = r.Lanes[i].Lane == again.Lanes[i].Lane && (len(r.Lanes) == 1 || r.Lanes[i].Weight == again.Lanes[i].Weight)
		}
		if !same {
			t.Fatalf("%q changed in a round trip through %q: was %+v, now %+v", spec, r.String(), r, again)
		}
	})
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
