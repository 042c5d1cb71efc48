package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"berth.dev/berth/rpc/api"
)

// The consumers the csiflow section measures, interleaved run by run on
// one dev agent: what the section measured first (raw_exec `/bin/sleep`,
// which exits on its first signal) and what users run (the isolating exec
// driver: its own mount and PID namespaces, a pivot_root into the task
// directory, a cgroup, and a shell that traps TERM and exits from its
// handler, as in the side-by-side with Nomad of issue 26).
const (
	csiFlowRawExec = "raw_exec"
	csiFlowExec    = "exec"
)

// csiFlowTargets are the targets (medians) of one consumer: submit →
// running and stop → claim freed.
var csiFlowTargets = map[string][2]time.Duration{
	csiFlowRawExec: {csiFlowSubmitTarget, csiFlowStopTarget},
	csiFlowExec:    {40 * time.Millisecond, 15 * time.Millisecond},
}

// csiFlowTrapScript is the exec consumer's shell: it waits on a
// background sleep, so the TERM trap runs the moment the signal arrives
// (a foreground sleep would defer it until the sleep ends), and exits 0
// from the handler; the init's PID namespace ends the orphaned sleep.
const csiFlowTrapScript = `trap 'exit 0' TERM; sleep 600 & wait`

// csiFlowTaskHCL is the consumer task's driver and config blocks.
func csiFlowTaskHCL(consumer string) string {
	if consumer == csiFlowExec {
		return fmt.Sprintf(`      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
`, csiFlowTrapScript)
	}
	return `      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
`
}

// csiFlowAgentHCL turns on the exec driver (it is off until the operator
// turns it on, and needs root).
const csiFlowAgentHCL = `
plugin "exec" {
  config {
    enabled = true
  }
}
`

// csiFlowNeedRoot fails the section clearly without root: the plugin
// bind-mounts its volumes and the exec driver needs root.
func csiFlowNeedRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("csiflow needs root: the hostpath plugin bind-mounts its volumes and the exec consumer runs isolated (run make bench as root)")
	}
	return nil
}

// mountWatch follows the host's mount table and reports when the last
// mount whose mount point holds every one of match is gone. It waits in
// poll(2) on /proc/self/mountinfo, which the kernel wakes with POLLPRI on
// a change of this namespace's table, with a 1 ms timeout: an unmount
// propagated from a peer mount in another namespace does not wake it.
type mountWatch struct {
	gone chan time.Time
	err  chan error
}

// watchMountGone starts a watch; it fails if no such mount exists now.
func watchMountGone(match ...string) (*mountWatch, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 0, 1<<16)
	read := func() (bool, error) {
		buf = buf[:0]
		if _, err := f.Seek(0, 0); err != nil {
			return false, err
		}
		for {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			n, err := f.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if n == 0 || err != nil {
				break
			}
		}
		return mountInfoHas(buf, match), nil
	}
	has, err := read()
	if err != nil || !has {
		f.Close()
		if err == nil {
			err = fmt.Errorf("no host mount point holds %q", match)
		}
		return nil, err
	}
	w := &mountWatch{gone: make(chan time.Time, 1), err: make(chan error, 1)}
	go func() {
		defer f.Close()
		fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLPRI | unix.POLLERR}}
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := unix.Poll(fds, 1); err != nil && !errors.Is(err, unix.EINTR) {
				w.err <- err
				return
			}
			has, err := read()
			if err != nil {
				w.err <- err
				return
			}
			if !has {
				w.gone <- time.Now()
				return
			}
		}
		w.err <- fmt.Errorf("host mount %q still there after 60 s", match)
	}()
	return w, nil
}

// wait returns when the mount went.
func (w *mountWatch) wait() (time.Time, error) {
	select {
	case t := <-w.gone:
		return t, nil
	case err := <-w.err:
		return time.Time{}, err
	}
}

// mountInfoHas reports whether a line of mountinfo has a mount point (its
// fifth field) holding every one of match.
func mountInfoHas(info []byte, match []string) bool {
	for line := range bytes.SplitSeq(info, []byte{'\n'}) {
		fields := strings.Fields(string(line))
		if len(fields) < 5 {
			continue
		}
		all := true
		for _, m := range match {
			all = all && strings.Contains(fields[4], m)
		}
		if all {
			return true
		}
	}
	return false
}

// benchCSIFlowVs measures the exec consumer on two dev agents, one of the
// old binary and one of the new, alternately run by run (machine speed
// drifts; only an interleaved run compares), and prints each point's
// median side by side. make bench does not run it; BERTH_OLD_BIN does.
func benchCSIFlowVs(oldBin, newBin string, plan jobRunPlan) error {
	bins := []string{oldBin, newBin}
	clients := make([]*api.Client, len(bins))
	for k, bin := range bins {
		agent, err := startDevAgentWith(bin, false, csiFlowAgentHCL)
		if err != nil {
			return err
		}
		defer agent.stop()
		c, err := api.NewClient("http://" + agent.http)
		if err != nil {
			return err
		}
		if err := setUpCSIFlow(c, bin, agent.dir); err != nil {
			return fmt.Errorf("%s: %w (agent log: %s)", bin, err, agent.logPath)
		}
		clients[k] = c
	}
	runs := make([][]csiFlowRun, len(bins))
	for i := range plan.warmup + plan.runs {
		for n := range clients {
			k := (n + i) % len(clients) // which goes first alternates
			c := clients[k]
			r, err := oneCSIFlowRun(c, fmt.Sprintf("bench-csi-%03d", i), csiFlowExec)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", bins[k], i, err)
			}
			if i >= plan.warmup {
				runs[k] = append(runs[k], r)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "exec consumer, old %s vs new %s, %d runs each after %d warm-up, alternated (medians since the register / stop call, and of each step from the point above):\n\n",
		oldBin, newBin, plan.runs, plan.warmup)
	b.WriteString("| point | old | new | step old | step new |\n|---|--:|--:|--:|--:|\n")
	for _, path := range [][]string{csiFlowSubmitSteps, csiFlowStopSteps} {
		for k, step := range path {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", step, fmtMS(csiFlowMedian(runs[0], step)), fmtMS(csiFlowMedian(runs[1], step)),
				fmtMS(csiFlowStepMedian(runs[0], path[:k], step)), fmtMS(csiFlowStepMedian(runs[1], path[:k], step)))
		}
	}
	_, err := os.Stdout.WriteString(b.String())
	return err
}

// csiFlowStepMedian is the median of step's time from the latest of the
// earlier steps each run has.
func csiFlowStepMedian(runs []csiFlowRun, earlier []string, step string) time.Duration {
	var deltas []time.Duration
	for _, r := range runs {
		if p, ok := r[step]; ok {
			deltas = append(deltas, p-r.before(earlier))
		}
	}
	if len(deltas) == 0 {
		return 0
	}
	slices.Sort(deltas)
	return deltas[len(deltas)/2]
}

// csiFlowMedian is the median of step's point over the runs that have it.
func csiFlowMedian(runs []csiFlowRun, step string) time.Duration {
	var points []time.Duration
	for _, r := range runs {
		if p, ok := r[step]; ok {
			points = append(points, p)
		}
	}
	if len(points) == 0 {
		return 0
	}
	slices.Sort(points)
	return points[len(points)/2]
}
