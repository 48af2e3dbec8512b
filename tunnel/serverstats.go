package tunnel

import "sync/atomic"

// ServerStats counts events a Server has seen since it was created.
type ServerStats struct {
	// Reclaimed counts requests taken over from a worker whose lease expired.
	Reclaimed int64
	// LeasesLost counts requests this worker lost to another worker.
	LeasesLost int64
	// DeletedWhilePending counts entries Redis reported deleted before they
	// were acknowledged (trimmed from under the pending list).
	DeletedWhilePending int64
	// DeadLettersHeld counts dead letters held back because their
	// dead-letter stream was at its cap (ServerOptions.MaxDeadLetters):
	// each time a request or an unreadable entry was kept for later
	// instead of dead-lettered (one held request counts again each time
	// it comes back to a stream that is still full).
	DeadLettersHeld int64
}

// serverStats holds the live counters behind ServerStats.
type serverStats struct {
	reclaimed, leasesLost, deletedWhilePending, deadLettersHeld atomic.Int64
}

// Stats returns the server's event counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{
		Reclaimed:           s.stats.reclaimed.Load(),
		LeasesLost:          s.stats.leasesLost.Load(),
		DeletedWhilePending: s.stats.deletedWhilePending.Load(),
		DeadLettersHeld:     s.stats.deadLettersHeld.Load(),
	}
}

// deadLetterCap is ServerOptions.MaxDeadLetters as the scripts take it:
// 0 for no cap.
func (s *Server) deadLetterCap() int64 {
	return int64(max(s.opts.MaxDeadLetters, 0))
}
