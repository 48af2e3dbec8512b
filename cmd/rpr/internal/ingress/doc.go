// Package ingress is the near side of a tunnel for existing services (rpr
// ingress): an http.Handler that takes HTTP requests and gRPC calls, finds
// each one's route in the upstream table and sends it through rpr to the
// far side's egress, answering with the upstream's response, or with a
// status that says what went wrong and whether the request ran.
package ingress
