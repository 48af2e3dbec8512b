// Package egress is the far side of a tunnel for existing services (rpr
// egress): it serves the rpr.tunnel.v1.HTTP and rpr.tunnel.v1.GRPC
// services by forwarding each call to the upstream its route table names,
// and answers with what the upstream said. It forwards only to upstreams
// of the table, never to an address a request names.
package egress
