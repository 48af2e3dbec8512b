// Package grpcraw is what both ends of rpr's gRPC passthrough share: a
// gRPC codec that carries messages as their encoded bytes (so rpr ingress
// and egress forward any method without its schema), the names of the
// rpr headers a forwarded call travels with, which metadata keys cross
// the tunnel, and the conversion of statuses between gRPC and rpr that
// keeps code, message and details exactly.
package grpcraw
