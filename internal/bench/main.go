// Command bench measures berth against baselines taken in the same run and
// prints one table per area. `make bench` runs it. Speeds on a shared machine
// drift, so every figure that matters is a ratio to a baseline measured
// interleaved with it, never an absolute threshold.
package main

import (
	"flag"
	"fmt"
	"os"
)

// section is one area's benchmark; it prints its own table to stdout.
type section struct {
	name string
	run  func(opts options) error
}

type options struct {
	// quick shortens every measurement (used by the smoke test in make test).
	quick bool
}

func main() {
	var opts options
	only := flag.String("only", "", "run only the named section (raft, drivers, csi)")
	flag.BoolVar(&opts.quick, "quick", false, "short runs, for a smoke test")
	flag.Parse()

	sections := []section{
		{"raft", benchRaft},
		{"drivers", benchDrivers},
		{"csi", benchCSI},
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
		os.Exit(1)
	}
}
