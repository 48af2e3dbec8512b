package upstream

import (
	"fmt"
	"strconv"
)

// A request that rpr egress forwards can come back to an rpr ingress: an
// upstream address that is an ingress (a route set by mistake, or a port
// an ingress took over), or a service that calls through the tunnel with
// the headers it was called with. Without a bound such a loop forwards
// every request again until a route's concurrency runs out, and then
// waits forever, since gRPC calls have no default deadline. So the egress
// counts hops on every request it forwards, and an ingress refuses one
// that has crossed MaxHops tunnels already.

// HopsHeader counts the rpr tunnels a request has crossed: every egress
// sets it on what it forwards to one more than the request carried
// (gRPC: metadata "x-rpr-hops").
const HopsHeader = "X-Rpr-Hops"

// MaxHops is how many tunnels a request may have crossed when it reaches
// an ingress: a chain of tunnels (site A to B, B to C) takes a few, a
// loop reaches it at once.
const MaxHops = 8

// Hops reads a HopsHeader value: 0 for none. A value that is not a
// count reads as MaxHops, so that a request whose count was mangled is
// refused rather than forwarded forever.
func Hops(value string) int {
	if value == "" {
		return 0
	}
	n, err := strconv.Atoi(value)
	if err != nil || n < 0 {
		return MaxHops
	}
	return n
}

// NextHops is the HopsHeader value for a request forwarded on: one more
// than value's count.
func NextHops(value string) string {
	return strconv.Itoa(min(Hops(value), MaxHops) + 1)
}

// LoopError says why an ingress refused a request that crossed hops
// tunnels already, and how to find the loop.
func LoopError(hops int) string {
	return fmt.Sprintf("rpr ingress: forwarding loop: this request has crossed rpr tunnels %d times already (%s); an egress route's upstream probably leads back to an rpr ingress: check the upstream addresses of rpr upstreams ls", hops, HopsHeader)
}
