package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"syscall"
)

// jobProfile profiles every process of the simulation while the job
// scenario runs: the simulator itself with Go's CPU profiler
// (sim.pprof, read with `go tool pprof`), and each server process it
// started with `perf record -g` (<name>.perf.data, read with `perf
// report -i`), since the servers expose no profiler of their own. Go
// binaries keep frame pointers, so perf's call graphs are whole.
type jobProfile struct {
	dir   string
	sim   *os.File
	perfs []*exec.Cmd
}

// startJobProfile begins the profiles into dir. Without perf on PATH the
// servers go unprofiled and it says so on warn.
func startJobProfile(dir string, servers []*server, warn func(string)) (*jobProfile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := &jobProfile{dir: dir}
	f, err := os.Create(filepath.Join(dir, "sim.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("profiling the simulator (is -cpuprofile set too?): %w", err)
	}
	p.sim = f
	perf, err := exec.LookPath("perf")
	if err != nil {
		warn("nodesim: no perf on PATH: the servers are not profiled")
		return p, nil
	}
	for _, sv := range servers {
		if !sv.alive() {
			continue
		}
		cmd := exec.Command(perf, "record", "-q", "-g", "-F", "499", "-p", fmt.Sprint(sv.cmd.Process.Pid),
			"-o", filepath.Join(dir, sv.name+".perf.data"))
		if err := cmd.Start(); err != nil {
			p.stop()
			return nil, fmt.Errorf("perf record of %s: %w", sv.name, err)
		}
		p.perfs = append(p.perfs, cmd)
	}
	return p, nil
}

// stop ends the profiles and waits for perf to write its files.
func (p *jobProfile) stop() error {
	var errs []error
	if p.sim != nil {
		pprof.StopCPUProfile()
		errs = append(errs, p.sim.Close())
		p.sim = nil
	}
	for _, cmd := range p.perfs {
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			errs = append(errs, err)
		}
		// perf exits non-zero when interrupted; its file is what counts.
		_ = cmd.Wait()
	}
	p.perfs = nil
	return errors.Join(errs...)
}

// runProfiledJob runs the job scenario, profiled when -job-profile is set.
func (s *sim) runProfiledJob(ctx context.Context, id string, n int, out io.Writer) (*jobRun, error) {
	if s.cfg.jobProfileDir == "" {
		return s.runJob(ctx, id, n)
	}
	if len(s.procs) > 0 {
		// The Go profile is this process's: with the nodes in node
		// processes (split.go) it would show only the scenario's driver.
		return nil, fmt.Errorf("-job-profile profiles the nodes only when they run in this process: add -procs 1 (%d node processes here)", len(s.procs))
	}
	p, err := startJobProfile(s.cfg.jobProfileDir, s.servers, func(msg string) { fmt.Fprintln(out, msg) })
	if err != nil {
		return nil, err
	}
	r, err := s.runJob(ctx, id, n)
	if perr := p.stop(); err == nil && perr != nil {
		return r, perr
	}
	fmt.Fprintln(out, "job profiles in", s.cfg.jobProfileDir)
	return r, err
}
