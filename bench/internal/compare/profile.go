package compare

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// profile is a CPU profile being written to a file, for a run's window
// alone (the zero value: none).
type profile struct{ f *os.File }

// StartProfile starts a CPU profile of this process into the file at
// path; StopProfile ends it. A measurement profiles its measured calls
// alone this way, in the callers' process and (Child.Profile) in the
// server child's.
func StartProfile(path string) (stop func() error, err error) {
	var p profile
	if err := p.start(path); err != nil {
		return nil, err
	}
	return p.stop, nil
}

func (p *profile) start(path string) error {
	if p.f != nil {
		return fmt.Errorf("a profile is already being written to %s", p.f.Name())
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	p.f = f
	return nil
}

// stop ends the profile, if one is being written, and closes its file.
func (p *profile) stop() error {
	if p.f == nil {
		return nil
	}
	pprof.StopCPUProfile()
	err := p.f.Close()
	p.f = nil
	return err
}
