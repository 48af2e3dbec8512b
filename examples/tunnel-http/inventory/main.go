// Command inventory is an ordinary HTTP service, written with no knowledge
// of rpr: the service a team already has and wants to reach from another
// network. The tunnel example (examples/tunnel-http/README.md) puts it
// behind rpr egress and calls it through rpr ingress.
//
//	GET  /inventory/items          the stock, as JSON
//	GET  /inventory/items/{sku}    one item; 404 if there is none
//	POST /inventory/orders         take an order {"sku": "...", "qty": n};
//	                               an Idempotency-Key header makes a repeat harmless
//	GET  /inventory/watch          server-sent events: the stock each second
//
//	go run ./examples/tunnel-http/inventory --listen 127.0.0.1:8081
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	flag.Parse()
	server := &http.Server{Addr: *listen, Handler: newInventory().routes(), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	fmt.Printf("inventory: serving http://%s/inventory/items\n", *listen)
	if err := server.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
