package main

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
	"github.com/rprtunnel/rpr/tunnel"
)

const liveViewService = "examples.greeter.v1.Greeter"

// greeterForLiveView runs the example Greeter server against rs until the
// test ends, adds a dead letter to its DLQ, and returns a client of it
// once the server is live.
func greeterForLiveView(t *testing.T, rs *redistest.Server) greeterv1.GreeterClient {
	t.Helper()
	startGreeter(t, rs, "live-view-w1")
	client, err := tunnel.NewClient(rs.Client(t), tunnel.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	rdb := rs.Client(t)
	dlq := tunnel.DefaultPrefix + "{" + liveViewService + "}:dlq"
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: dlq, Values: []string{"reason", "test"}}).Err(); err != nil {
		t.Fatal(err)
	}
	return greeterv1.NewGreeterClient(client)
}

// tableRows splits printed lines into fields, keyed by the first; the
// first line with a given first field wins (top's history section repeats
// the service names below the table).
func tableRows(out string) map[string][]string {
	rows := map[string][]string{}
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && rows[f[0]] == nil {
			rows[f[0]] = f
		}
	}
	return rows
}

func TestStats(t *testing.T) {
	rs := redistest.Start(t)
	greeterClient := greeterForLiveView(t, rs)

	// Calls keep coming while stats samples, so CALLS/S is above zero.
	ctx, stopCalls := context.WithCancel(context.Background())
	calling := make(chan struct{})
	go func() {
		defer close(calling)
		for ctx.Err() == nil {
			_, _ = greeterClient.SayHello(ctx, &greeterv1.SayHelloRequest{Name: "ada"})
		}
	}()
	out, code := runRPR(t, "stats", "--redis", rs.URL(), "--interval", "300ms")
	stopCalls()
	<-calling
	if code != 0 {
		t.Fatalf("rpr stats: exit %d, output:\n%s", code, out)
	}
	rows := tableRows(out)
	if got := strings.Join(rows["SERVICE"], " "); got != strings.Join(statsColumns, " ") {
		t.Fatalf("header %q; want %q; output:\n%s", got, strings.Join(statsColumns, " "), out)
	}
	row := rows[liveViewService]
	if len(row) != len(statsColumns) {
		t.Fatalf("no full row for %s in:\n%s", liveViewService, out)
	}
	// SERVICE LANE LENGTH LAG PENDING OLDEST CONSUMERS WORKERS RETRY DLQ CALLS/S
	if row[1] != "-" || row[6] != "1" || row[7] != "1" || row[8] != "0" || row[9] != "1" {
		t.Fatalf("row %q: want lane -, 1 consumer, 1 live worker, nothing retrying, 1 dead letter", row)
	}
	if rate, err := strconv.ParseFloat(row[10], 64); err != nil || rate <= 0 {
		t.Fatalf("CALLS/S %q: want a positive rate while calls were made", row[10])
	}

	// Named services only, in the order named; an unknown one is zeros.
	out, code = runRPR(t, "stats", "--redis", rs.URL(), "--interval", "50ms", "no.such.v1.Service", liveViewService)
	if code != 0 {
		t.Fatalf("rpr stats (named): exit %d, output:\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "no.such.v1.Service ") || !strings.HasPrefix(lines[2], liveViewService+" ") {
		t.Fatalf("named services: want the header and two rows in order, got:\n%s", out)
	}
	if got, want := strings.Fields(lines[1]), []string{"no.such.v1.Service", "-", "0", "0", "0", "-", "0", "0", "0", "0", "0.0"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("unknown service row %q; want %q", got, want)
	}

	// Nothing under another prefix.
	out, code = runRPR(t, "stats", "--redis", rs.URL(), "--prefix", "other:", "--interval", "10ms")
	if code != 0 || !strings.Contains(out, "no services under prefix") {
		t.Fatalf("empty prefix: exit %d, output %q", code, out)
	}
}

func TestFormatAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond:                    "850ms",
		12300 * time.Millisecond:                  "12.3s",
		4*time.Minute + 5*time.Second:             "4m05s",
		2*time.Hour + 3*time.Minute:               "2h03m",
		76 * time.Hour:                            "3d04h",
		59*time.Second + 990*time.Millisecond:     "59.9s",
		time.Hour - time.Nanosecond:               "59m59s",
		10*time.Minute + 500*time.Millisecond:     "10m00s",
		0:                                         "0ms",
		24*time.Hour + 59*time.Minute + time.Hour: "1d01h",
	} {
		if got := formatAge(d); got != want {
			t.Errorf("formatAge(%v) = %q; want %q", d, got, want)
		}
	}
}
