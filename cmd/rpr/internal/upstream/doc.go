// Package upstream is the table that tells rpr egress where to forward
// tunnelled traffic and rpr ingress how to send it: named routes, each
// matching requests by host and path prefix and naming one upstream. The
// table lives in Redis, one hash per forwarding service (rpr.tunnel.v1.HTTP
// for HTTP, rpr.tunnel.v1.GRPC for gRPC), so that both sides and the
// operator see the same routes and a change applies within a second,
// without a restart; a static file may stand in for it.
//
// An egress forwards only to the upstreams of its table: no part of a
// request ever names an address.
package upstream
