// Package compare holds what the comparisons of bench/ share: a throwaway
// redis-server, the echo service on rpr, on gRPC-go and on a plain
// Streams RPC with none of rpr's guarantees (their servers in this process
// or in a child process, see StartChild), rpr's async requests and asynq's
// tasks run end to end (RunAsync), and a closed-loop load that measures
// them alike.
package compare
