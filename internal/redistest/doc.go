// Package redistest starts real, throwaway redis-server processes for tests.
//
// The project's tests talk to a real Redis, never a mock (see DESIGN.md,
// "Quality bar"). Start gives every test its own server on a free loopback
// port, in its own t.TempDir(), with persistence off; starting one takes
// about 0.1 s, so one server per test is the default:
//
//	srv := redistest.Start(t)
//	rdb := srv.Client(t)            // closed when the test ends
//	url := srv.URL()                // "redis://127.0.0.1:PORT/0", for tunnel.Open
//
// Fault tests use the process controls: Kill (SIGKILL, a crash), Stop
// (SIGTERM, a clean shutdown), Restart (the same port and directory again),
// and Pause/Resume (SIGSTOP/SIGCONT, a hung server). DEBUG SLEEP is enabled
// (enable-debug-command yes), and CLIENT PAUSE needs nothing extra.
//
// Process hygiene: the helper signals only the process it started, through
// the os.Process handle it got from starting it (a pidfd on Linux, so never a
// recycled PID), and it reaps the process itself. The server also gets
// PR_SET_PDEATHSIG=SIGKILL, so it dies with the test binary even when
// `go test -timeout` ends the binary without running cleanups.
//
// If redis-server is not on PATH the test fails (it is not skipped): run
// `make test`, which installs it through scripts/ensure-redis.sh, or
// `apt-get install redis-server`. RPR_REDIS_SERVER may name another binary.
package redistest
