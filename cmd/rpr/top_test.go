package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/internal/redistest"
)

// TestTopInTmux runs `rpr top` the way a person sees it: in a terminal
// (a detached tmux session, 160x40), reads the screen, and quits with q.
func TestTopInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed, so rpr top cannot be tested in a terminal: apt-get install tmux (make test installs it through scripts/ensure-redis.sh)")
	}
	rs := redistest.Start(t)
	greeterClient := greeterForLiveView(t, rs)
	for range 10 {
		if _, err := greeterClient.SayHello(context.Background(), &greeterv1.SayHelloRequest{Name: "ada"}); err != nil {
			t.Fatal(err)
		}
	}
	// Beside it a 3-shard service with a server in the default lane and
	// requests queued in lane v3, which no server serves.
	mail := newMailWorldOn(t, rs)
	mail.serve("")
	mail.route("v3")
	for i := range 4 {
		mail.send(fmt.Sprint("queued-", i))
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "rpr")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// A private tmux server (its own socket, in the test's directory) and a
	// session of our own: the test touches no tmux session it did not
	// create.
	socket := filepath.Join(dir, "tmux.sock")
	session := fmt.Sprintf("rpr-top-%d", os.Getpid())
	exitFile := filepath.Join(dir, "exit")
	tmux := func(args ...string) (string, error) {
		cmd := exec.Command("tmux", append([]string{"-S", socket, "-f", os.DevNull}, args...)...)
		cmd.Env = append(os.Environ(), "TERM=xterm-256color")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	shell := fmt.Sprintf("%q top --redis %q; echo $? > %q", bin, rs.URL(), exitFile)
	if out, err := tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "40", shell); err != nil {
		if fi, statErr := os.Stat(os.DevNull); statErr == nil && fi.Mode()&os.ModeCharDevice == 0 {
			out += "\n(" + os.DevNull + " is not a character device on this machine, so tmux cannot start its server; restore it: mknod -m 666 /dev/null c 1 3)"
		}
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = tmux("kill-session", "-t", session) })

	// Wait for a screen with the header and a second refresh (a calls/s
	// figure) for the service.
	var screen string
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := tmux("capture-pane", "-p", "-t", session)
		if err != nil {
			t.Fatalf("tmux capture-pane: %v\n%s", err, out)
		}
		screen = out
		rows := tableRows(screen)
		row := rows[liveViewService]
		mailV3 := statsLines(screen, mailSvc)["v3"]
		if len(rows["SERVICE"]) > 0 && len(row) == len(statsColumns)+1 && row[11] != "-" && len(mailV3) == len(statsColumns)+1 && mailV3[11] != "-" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rpr top never showed the header and a full row for %s; screen:\n%s", liveViewService, screen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("rpr top screen:\n%s", screen)
	rows := tableRows(screen)
	wantHeader := "SERVICE LANE SHARDS LENGTH LAG PENDING OLDEST CONSUMERS WORKERS RETRY DLQ CALLS/S"
	if got := rows["SERVICE"]; strings.Join(got, " ") != wantHeader {
		t.Fatalf("header %q; want %q; screen:\n%s", got, wantHeader, screen)
	}
	// SERVICE LANE SHARDS LENGTH LAG PENDING OLDEST CONSUMERS WORKERS RETRY DLQ CALLS/S
	row := rows[liveViewService]
	if want := []string{liveViewService, "default", "1", "0", "0", "0", "-", "1", "1", "0", "1", "0.0"}; strings.Join(row, " ") != strings.Join(want, " ") {
		t.Fatalf("service row %q; want %q; screen:\n%s", row, want, screen)
	}
	mailRows := statsLines(screen, mailSvc)
	for lane, want := range map[string][]string{
		"default": {mailSvc, "default", "3", "0", "0", "0", "-", "0", "1", "0", "0", "0.0"},
		"v3":      {mailSvc, "v3", "3", "4", "4", "0", "-", "0", "0", "0", `"`, "0.0"},
	} {
		if got := mailRows[lane]; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s lane %s: row %q; want %q; screen:\n%s", mailSvc, lane, got, want, screen)
		}
	}
	if !strings.Contains(screen, "HISTORY") {
		t.Fatalf("no sparkline section; screen:\n%s", screen)
	}

	if out, err := tmux("send-keys", "-t", session, "q"); err != nil {
		t.Fatalf("tmux send-keys: %v\n%s", err, out)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		status, err := os.ReadFile(exitFile)
		if err == nil && len(bytes.TrimSpace(status)) > 0 {
			if s := strings.TrimSpace(string(status)); s != "0" {
				t.Fatalf("rpr top exited with status %s after q", s)
			}
			break
		}
		if time.Now().After(deadline) {
			screen, _ = tmux("capture-pane", "-p", "-t", session)
			t.Fatalf("rpr top did not exit within 10s of q; screen:\n%s", screen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSparkline(t *testing.T) {
	for _, c := range []struct {
		values []float64
		width  int
		want   string
	}{
		{nil, 4, "    "},
		{[]float64{0, 0}, 3, " ▁▁"},
		{[]float64{0, 1, 7, 14}, 4, "▁▂▅█"},
		{[]float64{0.01, 100}, 2, "▂█"},
		{[]float64{1, 2, 3, 4, 5}, 3, "▅▇█"},
	} {
		if got := sparkline(c.values, c.width); got != c.want {
			t.Errorf("sparkline(%v, %d) = %q; want %q", c.values, c.width, got, c.want)
		}
	}
}

// TestTopWithoutTerminal: rpr top in a pipe or a script says to use rpr
// stats, exit status 2, instead of drawing into a file.
func TestTopWithoutTerminal(t *testing.T) {
	rs := redistest.Start(t)
	startGreeter(t, rs, "top-pipe")
	res := runCLI(t, "", "top", "--redis", rs.URL(), greeterService)
	if res.code != 2 || !strings.Contains(res.stderr, "needs a terminal") || !strings.Contains(res.stderr, "use rpr stats") || res.stdout != "" {
		t.Errorf("top without a terminal: want exit 2 pointing at rpr stats; %v", res)
	}
}
