// Package faulttest is rpr's fault-test suite: it kills workers and clients
// mid-call (SIGKILL), stalls Redis (CLIENT PAUSE), restarts it under load and
// duplicates deliveries, and for every call checks by request id what was
// executed and what the caller was told. The package has no code of its own;
// everything lives in its tests.
//
// The suite talks to real redis-server processes (internal/redistest), one
// per test, and runs real server and client processes: the test binary
// re-executes itself in a role chosen by the RPR_FAULT_ROLE environment
// variable (see main_test.go). The service under test is a hand-written
// descriptor, fault.v1.Work, shaped like generated code, whose handler
// records each execution in Redis before doing its (simulated) work:
//
//	HINCRBY rprtest:execs <request-id> 1        executions per request id
//	RPUSH   rprtest:runs  "start <worker> <id>"  and "done"/"stop" when it ends
//
// so a test can tell, for every call, whether its handler ran, how often
// and on which worker, and compare that with the outcome the caller saw:
//
//   - a call that succeeded ran exactly once (at least once when the method
//     is idempotent and a worker died while running it);
//   - a call that failed with tunnel.NotExecuted(err) never ran, not even
//     later;
//   - a non-idempotent call never ran twice.
//
// Tests never assert durations. Waits are bounded and generous, and timings
// (such as the recovery time after a SIGKILL) are only logged:
//
//	go test -race -v -run TestRecoveryTimeAfterKill -count 5 ./internal/faulttest
//	RPR_FAULT_RECOVERY_RUNS=5 go test -v -run TestRecoveryTimeAfterKill ./internal/faulttest
//
// The second form runs five kills in one test and logs their median. Set
// RPR_FAULT_LOGS=1 to see the full logs of every server and client, in the
// test process or not.
//
// The suite is a module of its own (github.com/rprtunnel/rpr/internal/faulttest)
// because it checks for leaked goroutines with go.uber.org/goleak: were it
// in the runtime's module, goleak would be a requirement of
// github.com/rprtunnel/rpr and so appear in the module graph of every
// program that imports tunnel. The go.work file at the repository root
// puts it in the workspace, so `go test ./internal/faulttest/...` runs it
// from the root against this checkout (its go.mod also replaces
// github.com/rprtunnel/rpr with the checkout, for GOWORK=off).
package faulttest
