package main

// The filter flags of rpr dlq ls, replay and drop.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rprtunnel/rpr/admin"
	"github.com/rprtunnel/rpr/tunnel"
)

// ageFlag is a --older-than/--newer-than value: a Go duration, or whole
// days ("2d", "1d12h"), never negative.
type ageFlag struct {
	d    time.Duration
	name string
}

func (f *ageFlag) String() string {
	if f.d == 0 {
		return "0" // unset: pflag shows no default for "0"
	}
	return f.d.String()
}

func (f *ageFlag) Type() string { return "duration" }

func (f *ageFlag) Set(s string) error {
	d, err := parseAge(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a duration; use e.g. --%s 90s, 15m, 2h or 3d", f.name)
	case d < 0:
		return fmt.Errorf("must not be negative; use e.g. --%s 1h", f.name)
	}
	f.d = d
	return nil
}

// parseAge reads a duration as time.ParseDuration does, plus a leading
// whole number of days ("3d", "1d12h").
func parseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	body := strings.TrimPrefix(s, "-")
	var days time.Duration
	if i := strings.IndexByte(body, 'd'); i > 0 {
		n, err := strconv.Atoi(body[:i])
		if err != nil {
			return 0, err
		}
		days, body = time.Duration(n)*24*time.Hour, body[i+1:]
	}
	var rest time.Duration
	if body != "" || days == 0 {
		var err error
		if rest, err = time.ParseDuration(body); err != nil {
			return 0, err
		}
	}
	if neg {
		return -(days + rest), nil
	}
	return days + rest, nil
}

// codeFlag is a --code value: a status code by name (any case, "-" for
// "_") or number; OK is refused, since no dead letter failed with it.
type codeFlag struct {
	code tunnel.Code
	set  bool
}

func (f *codeFlag) String() string {
	if !f.set {
		return ""
	}
	return f.code.String()
}

func (f *codeFlag) Type() string { return "code" }

func (f *codeFlag) Set(s string) error {
	name := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	code, ok := tunnel.ParseCode(name)
	switch {
	case !ok:
		return errors.New("not a status code; use a name such as UNAVAILABLE, DEADLINE_EXCEEDED or INVALID_ARGUMENT, or its number, e.g. --code 14")
	case code == tunnel.OK:
		return errors.New("no dead letter failed with OK; use a failure code such as --code UNAVAILABLE")
	}
	f.code, f.set = code, true
	return nil
}

// limitFlag is a --limit value: a count, 0 for no limit.
type limitFlag struct{ n int }

func (f *limitFlag) String() string { return strconv.Itoa(f.n) }

func (f *limitFlag) Type() string { return "int" }

func (f *limitFlag) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return errors.New("want a number of dead letters, 0 for no limit, e.g. --limit 100")
	}
	f.n = n
	return nil
}

// dlqSelection holds the filter flags ls, replay and drop share.
type dlqSelection struct {
	method string
	code   codeFlag
	older  ageFlag
	newer  ageFlag
	limit  limitFlag
}

func (s *dlqSelection) register(cmd *cobra.Command, limit int, limitHelp string) {
	s.older.name, s.newer.name, s.limit.n = "older-than", "newer-than", limit
	f := cmd.Flags()
	f.StringVar(&s.method, "method", "", `only this method: its short name ("Charge") or full name ("pkg.Svc/Charge")`)
	f.Var(&s.code, "code", "only letters whose last attempt failed with this code (UNAVAILABLE, INTERNAL, 14...)")
	f.Var(&s.older, "older-than", "only letters dead-lettered longer ago than this (90s, 15m, 2h, 3d)")
	f.Var(&s.newer, "newer-than", "only letters dead-lettered within this (90s, 15m, 2h, 3d)")
	f.Var(&s.limit, "limit", limitHelp)
}

// filtered reports whether any filter flag is set.
func (s *dlqSelection) filtered() bool {
	return s.method != "" || s.code.set || s.older.d > 0 || s.newer.d > 0
}

// filter returns the admin.DeadLetterFilter, or an exit-2 error when
// the flags cannot select anything.
func (s *dlqSelection) filter() (admin.DeadLetterFilter, error) {
	if strings.Count(s.method, "/") > 1 || strings.HasSuffix(s.method, "/") {
		return admin.DeadLetterFilter{}, badInput(fmt.Errorf("--method %q: name a method as Charge or pkg.Svc/Charge", s.method))
	}
	if s.older.d > 0 && s.newer.d > 0 && s.older.d >= s.newer.d {
		return admin.DeadLetterFilter{}, badInput(fmt.Errorf(
			"--older-than %v and --newer-than %v select nothing: for a window, --older-than must be the shorter, e.g. --older-than 10m --newer-than 2h",
			s.older.d, s.newer.d))
	}
	return admin.DeadLetterFilter{Method: s.method, Code: s.code.code, OlderThan: s.older.d, NewerThan: s.newer.d}, nil
}

// describe renders the filters as flags, for messages.
func (s *dlqSelection) describe() string {
	var parts []string
	if s.method != "" {
		parts = append(parts, "--method "+s.method)
	}
	if s.code.set {
		parts = append(parts, "--code "+s.code.code.String())
	}
	if s.older.d > 0 {
		parts = append(parts, "--older-than "+s.older.d.String())
	}
	if s.newer.d > 0 {
		parts = append(parts, "--newer-than "+s.newer.d.String())
	}
	return strings.Join(parts, " ")
}
