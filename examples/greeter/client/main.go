// Command client calls the example Greeter service through Redis: it makes
// --count SayHello calls named NAME-0 … NAME-(count-1), checks every reply,
// and prints a summary line "calls=N ok=K failed=F". It exits 0 only when
// every call succeeded.
//
//	go run ./examples/greeter/client --redis redis://10.0.0.5:6379/0 --name ada --count 10
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	greeterv1 "github.com/rprtunnel/rpr/gen/examples/greeter/v1"
	"github.com/rprtunnel/rpr/tunnel"
)

func main() {
	redisURL := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis URL: redis://host:port/db, a Cluster seed list redis://h1:p1,h2:p2, or redis+sentinel://h1:p1,h2:p2/master")
	name := flag.String("name", "world", "name to greet; calls are numbered NAME-0, NAME-1, ...")
	count := flag.Int("count", 1, "number of calls")
	concurrency := flag.Int("concurrency", 1, "calls in flight at once")
	timeout := flag.Duration("timeout", 5*time.Second, "deadline of each call")
	flag.Parse()
	if *count < 1 || *concurrency < 1 {
		fmt.Fprintln(os.Stderr, "greeter-client: --count and --concurrency must be at least 1")
		os.Exit(2)
	}
	ok, err := run(*redisURL, *name, *count, *concurrency, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "greeter-client:", err)
		os.Exit(1)
	}
	if ok != *count {
		os.Exit(1)
	}
}

func run(redisURL, name string, count, concurrency int, timeout time.Duration) (int, error) {
	ctx := context.Background()
	rdb, err := tunnel.Open(ctx, redisURL)
	if err != nil {
		return 0, err
	}
	defer rdb.Close()
	client, err := tunnel.NewClient(rdb, tunnel.ClientOptions{BizCode: "GRTC"})
	if err != nil {
		return 0, err
	}
	defer client.Close()
	greeter := greeterv1.NewGreeterClient(client)

	var ok, failed atomic.Int64
	next := make(chan int)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				who := fmt.Sprintf("%s-%d", name, i)
				callCtx, cancel := context.WithTimeout(ctx, timeout)
				reply, err := greeter.SayHello(callCtx, &greeterv1.SayHelloRequest{Name: who})
				cancel()
				switch want := "Hello, " + who + "!"; {
				case err != nil:
					failed.Add(1)
					fmt.Fprintf(os.Stderr, "call %d: %v\n", i, err)
				case reply.GetMessage() != want:
					failed.Add(1)
					fmt.Fprintf(os.Stderr, "call %d: got %q, want %q\n", i, reply.GetMessage(), want)
				default:
					ok.Add(1)
				}
			}
		}()
	}
	for i := range count {
		next <- i
	}
	close(next)
	wg.Wait()
	fmt.Printf("calls=%d ok=%d failed=%d\n", count, ok.Load(), failed.Load())
	return int(ok.Load()), nil
}
