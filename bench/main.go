// Command bench measures berth against baselines taken in the same run and
// prints one table per area. `make bench` runs it. Speeds on a shared machine
// drift, so every figure that matters is a ratio to a baseline measured
// interleaved with it, never an absolute threshold.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"

	"berth.dev/berth/host/server"
)

// section is one area's benchmark; it prints its own table to stdout.
type section struct {
	name string
	run  func(opts options) error
}

type options struct {
	// quick shortens every measurement (used by the smoke test in make test).
	quick bool
	// payload, if set, is the only raft payload measured ("real", "stress").
	payload string
}

func main() {
	os.Exit(run())
}

// run runs the chosen sections and returns the exit code; it returns rather
// than exiting so that the CPU profile is written out.
func run() int {
	var opts options
	only := flag.String("only", "", "run only the named section (raft, drivers, csi, scheduler, volumes, jobrun, csiplugin, csiflow, raft-tls, secure, containerd, ui, scale, cli, volmove, restore)")
	flag.BoolVar(&opts.quick, "quick", false, "short runs, for a smoke test")
	flag.StringVar(&opts.payload, "payload", "", "raft section: measure only this payload (real, stress)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to `file`")
	gcPercent := flag.Int("gc-percent", server.DefaultGCPercent,
		"the Go collector's target for the whole run (default: what an agent running a server sets)")
	flag.Parse()

	// The clusters measured here are servers: they run with the collector
	// target an agent gives its server, so the figures are what users get.
	debug.SetGCPercent(*gcPercent)
	fmt.Printf("Go collector target (debug.SetGCPercent): %d (agent server default %d; GOGC is overridden)\n",
		*gcPercent, server.DefaultGCPercent)

	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		defer stop()
	}

	sections := []section{
		{"raft", benchRaft},
		{"drivers", benchDrivers},
		{"csi", benchCSI},
		{"scheduler", benchScheduler},
		{"volumes", benchVolumes},
		{"jobrun", benchJobRun},
		{"csiplugin", benchCSIPlugin},
		{"csiflow", benchCSIFlow},
		{"raft-tls", benchRaftTLS},
		{"secure", benchSecure},
		{"containerd", benchContainerd},
		{"ui", benchUI},
		{"scale", benchScale},
		{"cli", benchCLI},
		{"volmove", benchVolMove},
		{"restore", benchRestore},
	}
	failed := false
	for _, s := range sections {
		if *only != "" && *only != s.name {
			continue
		}
		fmt.Printf("\n## %s\n\n", s.name)
		if err := s.run(opts); err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: %v\n", s.name, err)
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}

// startCPUProfile profiles the process into path until the returned stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: CPU profile: %v\n", err)
		}
	}, nil
}
