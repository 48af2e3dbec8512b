package tunnel

import (
	"log/slog"

	"github.com/rprtunnel/rpr/internal/wire"
)

// requestLogger is the logger of one request, with its id and method,
// made on first use: most requests log nothing, and slog's With costs
// allocations on every request that would otherwise pay for it. It is
// used by the one goroutine that handles the request.
type requestLogger struct {
	base *slog.Logger
	env  *wire.Request
	made *slog.Logger
}

// requestLog returns the logger of the request env.
func (s *Server) requestLog(env *wire.Request) *requestLogger {
	return &requestLogger{base: s.log, env: env}
}

// handlerLog returns the logger of the request req, kept in req itself so
// that handling a request allocates none.
func (s *Server) handlerLog(req *received) *requestLogger {
	if req.log.base == nil {
		req.log = requestLogger{base: s.log, env: req.env}
	}
	return &req.log
}

func (l *requestLogger) logger() *slog.Logger {
	if l.made == nil {
		l.made = l.base.With("request_id", l.env.ID, "method", l.env.Method)
	}
	return l.made
}

func (l *requestLogger) Debug(msg string, args ...any) { l.logger().Debug(msg, args...) }
func (l *requestLogger) Info(msg string, args ...any)  { l.logger().Info(msg, args...) }
func (l *requestLogger) Warn(msg string, args ...any)  { l.logger().Warn(msg, args...) }
func (l *requestLogger) Error(msg string, args ...any) { l.logger().Error(msg, args...) }
