package e2e

// The sites' isolation: the tiny TCP tool the test binary becomes inside a
// namespace, and the checks that siteA cannot reach into siteB while both
// reach the hub.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runHelper is the test binary re-executed inside a namespace.
//
//	listen ADDR: accept connections; answer any line with "+PONG"; print
//	             "listening" once bound; exit when stdin closes (the test
//	             ended or died).
//	dial ADDR:   connect within 2 s, send PING, print the reply line; exit 0
//	             only on "+PONG", 2 when the connection cannot be opened.
func runHelper(mode, addr string) int {
	switch mode {
	case "listen":
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("listen:", err)
			return 1
		}
		fmt.Println("listening")
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			os.Exit(0)
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return 1
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					_, _ = io.WriteString(c, "+PONG\r\n")
				}
			}()
		}
	case "dial":
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			fmt.Println("dial:", err)
			return 2
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.WriteString(c, "PING\r\n"); err != nil {
			fmt.Println("write:", err)
			return 1
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		line = strings.TrimSpace(line)
		fmt.Println(line)
		if err != nil || line != "+PONG" {
			return 1
		}
		return 0
	}
	fmt.Println("unknown helper mode", mode)
	return 1
}

// helperEnv is the environment that turns the test binary into runHelper.
// GORACE: a -race binary otherwise sleeps 1 s on exit.
func helperEnv(mode, addr string) []string {
	return append(os.Environ(), envHelper+"="+mode, envHelperAddr+"="+addr, "GORACE=atexit_sleep_ms=0")
}

// dialFrom runs the dial helper in ns: nil if addr answered +PONG.
func dialFrom(ctx context.Context, ns, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	cmd := inNS(ctx, ns, self)
	cmd.Env = helperEnv("dial", addr)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func checkIsolation(ctx context.Context, t *testing.T, topo *topology) {
	// Both sites reach the hub's Redis (an inline PING answered +PONG).
	for _, c := range []struct{ ns, addr string }{
		{topo.nsA, topo.hubSideA}, {topo.nsB, topo.hubSideB},
		{topo.nsA, topo.hubVIP}, {topo.nsB, topo.hubVIP},
	} {
		if out, err := dialFrom(ctx, c.ns, c.addr); err != nil {
			t.Errorf("%s cannot reach the hub redis at %s: %v: %s", c.ns, c.addr, err, out)
		}
	}

	// A listener inside siteB.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	listenAddr := net.JoinHostPort(topo.siteBIP, strconv.Itoa(siteBListenPort))
	lctx, lcancel := context.WithCancel(ctx)
	listener := inNS(lctx, topo.nsB, self)
	listener.Env = helperEnv("listen", listenAddr)
	stdin, err := listener.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	listenOut := newSyncBuffer("listening")
	listener.Stdout, listener.Stderr = listenOut, listenOut
	if err := listener.Start(); err != nil {
		t.Fatalf("starting a listener in %s: %v", topo.nsB, err)
	}
	listenDone := make(chan error, 1)
	go func() { listenDone <- listener.Wait() }()
	defer func() {
		stdin.Close() // the helper exits on stdin EOF
		select {
		case <-listenDone:
		case <-time.After(5 * time.Second):
			lcancel() // SIGKILL through CommandContext
			<-listenDone
		}
		lcancel()
	}()
	select {
	case <-listenOut.seen:
	case err := <-listenDone:
		listenDone <- err // for the deferred wait
		t.Fatalf("listener in %s on %s exited: %v: %s", topo.nsB, listenAddr, err, listenOut.String())
	case <-time.After(15 * time.Second):
		t.Fatalf("listener in %s on %s not ready after 15s: %s", topo.nsB, listenAddr, listenOut.String())
	}

	// Positive control: the listener works, from inside its own site.
	if out, err := dialFrom(ctx, topo.nsB, listenAddr); err != nil {
		t.Fatalf("positive control failed: %s cannot reach its own listener %s: %v: %s", topo.nsB, listenAddr, err, out)
	}
	// The point: siteA cannot open a connection into siteB ...
	if out, err := dialFrom(ctx, topo.nsA, listenAddr); err == nil {
		t.Errorf("%s opened a TCP connection to %s in %s: the sites are not isolated", topo.nsA, listenAddr, topo.nsB)
	} else {
		t.Logf("ok: %s -> %s in %s is blocked (%s)", topo.nsA, listenAddr, topo.nsB, out)
	}
	// ... nor reach the hub through siteB's side.
	if out, err := dialFrom(ctx, topo.nsA, topo.hubSideB); err == nil {
		t.Errorf("%s reached %s, the hub's %s side", topo.nsA, topo.hubSideB, topo.nsB)
	} else {
		t.Logf("ok: %s -> %s (hub, %s side) is blocked (%s)", topo.nsA, topo.hubSideB, topo.nsB, out)
	}
	// ... nor the other way round.
	if out, err := dialFrom(ctx, topo.nsB, topo.hubSideA); err == nil {
		t.Errorf("%s reached %s, the hub's %s side", topo.nsB, topo.hubSideA, topo.nsA)
	} else {
		t.Logf("ok: %s -> %s (hub, %s side) is blocked (%s)", topo.nsB, topo.hubSideA, topo.nsA, out)
	}
}

// syncBuffer collects a process' output and reports when a marker appears.
