package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

func TestDlqPoisonMessageStory(t *testing.T) {
	w := newJobsWorld(t)
	var charges []string
	for i := range 3 {
		charges = append(charges, w.enqueue("Charge", fmt.Sprintf("order-%d", i+1)))
	}
	notify := w.enqueue("Notify", "customer-7")
	w.enqueue("Notify", "customer-8")
	w.enqueueGarbage()
	w.waitFor("6 dead letters", func() bool { return w.dlqLen() == 6 })

	// ls: everything, oldest first, with the footer.
	res := w.dlq("", "ls", jobsSvc)
	if res.code != 0 || !strings.Contains(res.stdout, "6 dead letters of "+jobsSvc+"\n") {
		t.Fatalf("ls:\n%s", res)
	}
	t.Logf("rpr dlq ls %s:\n%s", jobsSvc, res.stdout)
	if header := strings.Fields(strings.SplitN(res.stdout, "\n", 2)[0]); strings.Join(header, " ") != strings.Join(dlqColumns, " ") {
		t.Errorf("header %q, want %q", header, dlqColumns)
	}
	rows := lsRows(t, res.stdout)
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6:\n%s", len(rows), res.stdout)
	}
	byRequest := map[string][]string{}
	var garbageEntry string
	for entry, f := range rows {
		byRequest[f[1]] = f
		if f[1] == "-" {
			garbageEntry = entry
		}
	}
	// ENTRY REQUEST METHOD CODE ATTEMPTS AGE REASON...
	if f := byRequest[charges[0]]; len(f) < 7 || f[2] != "Charge" || f[3] != "UNAVAILABLE" || f[4] != "2" ||
		strings.Join(f[6:], " ") != "attempts exhausted (2 of 2): payments backend is down" {
		t.Errorf("Charge row %q", f)
	}
	if f := byRequest[notify]; len(f) < 7 || f[2] != "Notify" || f[3] != "INVALID_ARGUMENT" || f[4] != "1" ||
		!strings.Contains(strings.Join(f[6:], " "), "not retryable: no address for customer-7") {
		t.Errorf("Notify row %q", f)
	}
	if f := rows[garbageEntry]; garbageEntry == "" || f[2] != "-" || f[4] != "-" || !strings.Contains(strings.Join(f[6:], " "), "envelope") {
		t.Errorf("garbage row %q (entry %q)", f, garbageEntry)
	}

	// Filters, the limit and their footers.
	for _, tc := range []struct {
		args   []string
		rows   int
		footer string
	}{
		{[]string{"--method", "Notify"}, 2, "2 of 6 dead letters of " + jobsSvc + " match"},
		{[]string{"--method", jobsSvc + "/Charge"}, 3, "3 of 6 dead letters of " + jobsSvc + " match"},
		{[]string{"--code", "unavailable"}, 3, "3 of 6"},
		{[]string{"--code", "invalid-argument"}, 3, "3 of 6"}, // Notify twice, and the garbage
		{[]string{"--code", "14", "--method", "Charge", "--limit", "1"}, 1, "showing 1 of 6 dead letters of " + jobsSvc + " (3 match; oldest first; --limit 0 shows all)"},
		{[]string{"--limit", "2"}, 2, "showing 2 of 6 dead letters of " + jobsSvc + " (oldest first; --limit 0 shows all)"},
		{[]string{"--newer-than", "1h"}, 6, "6 of 6"},
		{[]string{"--older-than", "10m", "--newer-than", "1d"}, 0, "none of the 6 dead letters of " + jobsSvc + " match --older-than 10m0s --newer-than 24h0m0s"},
	} {
		res := w.dlq("", "ls", append([]string{jobsSvc}, tc.args...)...)
		if res.code != 0 || !strings.Contains(res.stdout, tc.footer) {
			t.Errorf("ls %v: want %q in:\n%s", tc.args, tc.footer, res)
			continue
		}
		if tc.rows > 0 {
			if got := len(lsRows(t, res.stdout)); got != tc.rows {
				t.Errorf("ls %v: %d rows, want %d:\n%s", tc.args, got, tc.rows, res.stdout)
			}
		}
	}

	// The reason is cut to the width.
	t.Setenv("COLUMNS", "130")
	res = w.dlq("", "ls", jobsSvc, "--method", "Charge")
	for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		if n := len([]rune(line)); n > 130 || strings.Contains(line, " Charge ") && (n != 130 || !strings.HasSuffix(line, "…")) {
			t.Errorf("line of %d runes at COLUMNS=130; want rows cut to 130, ending in …: %q", n, line)
		}
	}
	t.Setenv("COLUMNS", "")

	// -o json: every field, the payload decoded with the published schema.
	res = w.dlq("", "ls", jobsSvc, "-o", "json", "--method", "Charge", "--limit", "1")
	var doc struct {
		Service     string       `json:"service"`
		DLQ         string       `json:"dlq"`
		Total       int64        `json:"total"`
		Matched     int64        `json:"matched"`
		Shown       int          `json:"shown"`
		DeadLetters []deadLetter `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &doc); err != nil || res.code != 0 {
		t.Fatalf("ls -o json: %v\n%s", err, res)
	}
	if doc.Service != jobsSvc || doc.DLQ != "rpr:v1:{"+jobsSvc+"}:dlq" || doc.Total != 6 || doc.Matched != 3 || doc.Shown != 1 || len(doc.DeadLetters) != 1 {
		t.Fatalf("ls -o json counts: %+v", doc)
	}
	first := doc.DeadLetters[0]
	job := fmt.Sprintf("order-%d", slices.Index(charges, first.RequestID)+1)
	if !slices.Contains(charges, first.RequestID) || first.Kind != "async" || first.Code != "UNAVAILABLE" || first.Attempts != 2 ||
		first.Worker != "dlq-w1" || first.Failed == nil || first.Enqueued == nil || first.Header["tenant"][0] != "acme" ||
		first.PayloadType != "rprtest.jobs.v1.JobRequest" || string(first.PayloadBase64) != string(mustMarshal(t, wrapperspb.String(job))) {
		t.Errorf("ls -o json letter: %+v", first)
	}
	var payload map[string]string
	if err := json.Unmarshal(first.Payload, &payload); err != nil || payload["job"] != job {
		t.Errorf("payload %s (%v), want {\"job\": %q}", first.Payload, err, job)
	}

	// show, by entry id and by request id.
	chargeEntry := byRequest[charges[0]][0]
	res = w.dlq("", "show", jobsSvc, chargeEntry)
	t.Logf("rpr dlq show %s %s:\n%s", jobsSvc, chargeEntry, res.stdout)
	stamp := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(\d+(ms|\.\ds) ago\)`
	for _, want := range []string{
		`(?m)^entry      ` + regexp.QuoteMeta(chargeEntry+" in rpr:v1:{"+jobsSvc+"}:dlq") + `$`,
		`(?m)^request    ` + charges[0] + `$`,
		`(?m)^key        ` + charges[0] + ` \(the request id: no idempotency key was set\)$`,
		`(?m)^method     rprtest\.jobs\.v1\.Jobs/Charge$`,
		`(?m)^kind       async \(replayable\)$`,
		`(?m)^code       UNAVAILABLE \(14\)$`,
		`(?m)^error      payments backend is down$`,
		`(?m)^reason     attempts exhausted \(2 of 2\)$`,
		`(?m)^attempts   2$`,
		`(?m)^replays    0$`,
		`(?m)^enqueued   ` + stamp + `$`,
		`(?m)^failed     ` + stamp + `$`,
		`(?m)^worker     dlq-w1$`,
		`(?m)^metadata   tenant: acme$`,
		`(?m)^payload    rprtest\.jobs\.v1\.JobRequest, 9 bytes$`,
		`(?m)^    "job": "order-1"$`,
	} {
		if !regexp.MustCompile(want).MatchString(res.stdout) {
			t.Errorf("show lacks %s:\n%s", want, res)
		}
	}
	ages := regexp.MustCompile(`\(\S+ ago\)`)
	if byID := w.dlq("", "show", jobsSvc, charges[0]); byID.code != 0 || ages.ReplaceAllString(byID.stdout, "") != ages.ReplaceAllString(res.stdout, "") {
		t.Errorf("show by request id differs from show by entry id:\n%s", byID)
	}
	res = w.dlq("", "show", jobsSvc, garbageEntry)
	if res.code != 0 || !strings.Contains(res.stdout, "kind       unknown: the envelope does not decode") || !strings.Contains(res.stdout, "envelope   does not decode: ") ||
		!strings.Contains(res.stdout, "code       INVALID_ARGUMENT (3)") {
		t.Errorf("show of the undecodable entry:\n%s", res)
	}
	res = w.dlq("", "show", jobsSvc, "1-1")
	if res.code != 1 || !strings.Contains(res.stderr, "no dead letter 1-1 in the DLQ of "+jobsSvc+" (rpr:v1:{"+jobsSvc+"}:dlq)") {
		t.Errorf("show of an unknown id:\n%s", res)
	}
	res = w.dlq("", "show", jobsSvc, "not-an-id")
	if res.code != 2 || !strings.Contains(res.stderr, "neither an entry id") {
		t.Errorf("show of a malformed id:\n%s", res)
	}
	res = w.dlq("", "show", "rprtest.jobs.v1.Jbos", "1-1")
	if res.code != 1 || !strings.Contains(res.stderr, "unknown service rprtest.jobs.v1.Jbos; known: "+jobsSvc+" (rpr ls lists them)") {
		t.Errorf("show in a mistyped service:\n%s", res)
	}

	// Without a published schema, the payload is raw, and says why.
	schemaKey := tunnel.DefaultPrefix + "{" + jobsSvc + "}:schema"
	schema, err := w.rdb.Get(context.Background(), schemaKey).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	w.rdb.Del(context.Background(), schemaKey)
	res = w.dlq("", "show", jobsSvc, chargeEntry)
	for _, want := range []string{"payload    9 bytes; the schema of " + jobsSvc + " is not published in Redis", "0a 07 6f 72 64 65 72 2d  31", "base64     CgdvcmRlci0x"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("show without schema lacks %q:\n%s", want, res)
		}
	}
	w.rdb.Set(context.Background(), schemaKey, schema, 0)

	// drop asks; "n", an empty stdin or anything else is no.
	for _, stdin := range []string{"n\n", "", "sure\n"} {
		res = w.dlq(stdin, "drop", jobsSvc, notify)
		if res.code != 1 || !strings.Contains(res.stderr, "Drop 1 dead letter of "+jobsSvc+"? [y/N]") || !strings.Contains(res.stderr, "not confirmed: nothing dropped") {
			t.Errorf("drop answered %q:\n%s", stdin, res)
		}
	}
	if n := w.dlqLen(); n != 6 {
		t.Fatalf("after declined drops: %d dead letters, want 6", n)
	}
	res = w.dlq("y\n", "drop", jobsSvc, notify)
	if res.code != 0 || res.stdout != "dropped 1 dead letter of "+jobsSvc+"\n" {
		t.Errorf("drop answered y:\n%s", res)
	}
	res = w.dlq("", "drop", jobsSvc, "--yes", "--code", "INVALID_ARGUMENT", "--method", "Notify")
	if res.code != 0 || res.stdout != "dropped 1 dead letter of "+jobsSvc+"\n" || strings.Contains(res.stderr, "[y/N]") {
		t.Errorf("drop --yes:\n%s", res)
	}
	res = w.dlq("", "drop", jobsSvc, notify)
	if res.code != 1 || !strings.Contains(res.stderr, "no dead letter "+notify) || !strings.Contains(res.stderr, "nothing changed") {
		t.Errorf("drop of a dropped letter:\n%s", res)
	}

	// Replaying before the fix: they come back, with the replay counted.
	res = w.dlq("", "replay", jobsSvc, charges[2])
	if res.code != 0 || !strings.Contains(res.stdout, "replayed 1 of 1 dead letter of "+jobsSvc) {
		t.Fatalf("replay of one:\n%s", res)
	}
	w.waitFor("the replayed letter to fail again", func() bool {
		r := w.dlq("", "show", jobsSvc, charges[2])
		return r.code == 0 && strings.Contains(r.stdout, "replays    1\n")
	})

	// The garbage cannot be replayed: named, it is an error; it stays.
	res = w.dlq("", "replay", jobsSvc, garbageEntry)
	if res.code != 1 || !strings.Contains(res.stdout, "skipped            1") || !strings.Contains(res.stdout, garbageEntry+"  its envelope does not decode") {
		t.Errorf("replay of the undecodable entry:\n%s", res)
	}

	// The fix is deployed: replay everything.
	w.fixed.Store(true)
	res = w.dlq("", "replay", jobsSvc, "--all", "--dry-run")
	if res.code != 0 || !strings.Contains(res.stdout, "would replay 4 dead letters of "+jobsSvc+" (dry run: nothing changed)") ||
		!regexp.MustCompile(`3\s+rprtest\.jobs\.v1\.Jobs/Charge\s+UNAVAILABLE`).MatchString(res.stdout) || w.dlqLen() != 4 {
		t.Errorf("replay --dry-run:\n%s", res)
	}
	res = w.dlq("", "replay", jobsSvc, "--all")
	t.Logf("rpr dlq replay %s --all:\n%s", jobsSvc, res.stdout)
	for _, want := range []string{
		"replayed 3 of 4 dead letters of " + jobsSvc,
		"replayed           3  queued again",
		"already succeeded  0",
		"gone               0",
		"skipped            1  cannot be replayed; left in the DLQ",
		garbageEntry + "  its envelope does not decode",
	} {
		if res.code != 0 || !strings.Contains(res.stdout, want) {
			t.Errorf("replay --all lacks %q:\n%s", want, res)
		}
	}
	w.waitFor("the three orders to succeed", func() bool { return w.succeeded() == 3 })
	if n := w.dlqLen(); n != 1 {
		t.Errorf("after the replay: %d dead letters, want 1 (the garbage)", n)
	}
	res = w.dlq("", "drop", jobsSvc, "--all", "--yes")
	if res.code != 0 || !strings.Contains(res.stdout, "dropped 1 dead letter") {
		t.Errorf("drop --all --yes:\n%s", res)
	}
	res = w.dlq("", "ls", jobsSvc)
	if res.code != 0 || res.stdout != jobsSvc+" has no dead letters (rpr:v1:{"+jobsSvc+"}:dlq is empty)\n" {
		t.Errorf("ls of the empty DLQ:\n%s", res)
	}
	res = w.dlq("", "replay", jobsSvc, "--all")
	if res.code != 0 || !strings.Contains(res.stdout, "nothing to replay") {
		t.Errorf("replay of the empty DLQ:\n%s", res)
	}
}

// TestDlqReplayManyInBatches replays more letters than one batch of the
// library's replay script holds, twice: once while still broken (they
// come back, replays counted), once fixed.
func TestDlqReplayManyInBatches(t *testing.T) {
	w := newJobsWorld(t)
	const n = 320
	for i := range n {
		w.enqueue("Notify", fmt.Sprintf("customer-%03d", i))
	}
	w.waitFor(fmt.Sprint(n, " dead letters"), func() bool { return w.dlqLen() == n })

	res := w.dlq("", "replay", jobsSvc, "--method", "Notify", "--limit", "150")
	if res.code != 0 || !strings.Contains(res.stdout, "replayed 150 of 150 dead letters") || res.stderr != "" {
		t.Fatalf("replay --limit 150:\n%s", res)
	}
	w.waitFor("the 150 to fail again", func() bool {
		if w.dlqLen() != n {
			return false
		}
		letters, err := serviceOf(w.rdb, jobsSvc).DeadLetters().List(context.Background(), admin.DeadLetterFilter{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		replayed := 0
		for _, dl := range letters {
			replayed += dl.Replays
		}
		return replayed == 150
	})

	w.fixed.Store(true)
	res = w.dlq("", "replay", jobsSvc, "--all")
	if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("replayed %d of %d dead letters", n, n)) {
		t.Fatalf("replay --all:\n%s", res)
	}
	w.waitFor(fmt.Sprint("all ", n, " to succeed"), func() bool { return w.succeeded() == n })
	if got := w.dlqLen(); got != 0 {
		t.Errorf("%d dead letters left, want 0", got)
	}
}

// TestDlqDropMany drops a large set by filter, confirmed on stdin.
func TestDlqDropMany(t *testing.T) {
	w := newJobsWorld(t)
	const n = 210
	for i := range n {
		w.enqueue("Notify", fmt.Sprintf("customer-%03d", i))
	}
	w.waitFor(fmt.Sprint(n, " dead letters"), func() bool { return w.dlqLen() == n })
	res := w.dlq("yes\n", "drop", jobsSvc, "--code", "INVALID_ARGUMENT")
	if res.code != 0 || res.stdout != fmt.Sprintf("dropped %d dead letters of %s\n", n, jobsSvc) ||
		!regexp.MustCompile(`210\s+rprtest\.jobs\.v1\.Jobs/Notify\s+INVALID_ARGUMENT`).MatchString(res.stderr) {
		t.Fatalf("drop:\n%s", res)
	}
	if got := w.dlqLen(); got != 0 {
		t.Errorf("%d dead letters left, want 0", got)
	}
}
