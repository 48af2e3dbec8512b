// Package nettest holds network helpers for the project's tests that are
// not about Redis (see package redistest for those).
//
// RefusedAddr gives a loopback address that refuses connections for as
// long as the test runs. The usual trick, listening on port 0 and closing
// the listener, does not: the kernel hands the freed port to the next
// listener that asks for port 0, one time in about 3,300 when two more
// listeners follow (measured on Linux), and a test whose "dead" upstream
// became its own ingress forwarded every call back to itself until its
// route's concurrency ran out, then hung.
package nettest
