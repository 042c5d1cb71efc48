// Command fuzzshort runs every fuzz target of the module for a short time;
// `make test` (and so CI) runs it as `make fuzz-short`. Targets are found
// at run time, so a target added or removed needs no edit here:
//
//  1. `go list` names each package's test files (build constraints applied);
//     packages whose test files declare no `func Fuzz…` are left out, so no
//     fuzz build is made for them;
//  2. `go test -list '^Fuzz'` on each remaining package names its targets,
//     exactly as `go test -fuzz` matches them (the listing is built with
//     -fuzz, so the instrumented build is shared with the runs);
//  3. each target runs alone: `go test -run '^$' -fuzz '^Name$' -fuzztime D`.
//
// A failing target does not stop the pass: every target runs, then the
// failures are listed (package and target, with go test's output, which
// names the input written to testdata/fuzz) and the exit code is 1. Finding
// no target at all is an error too, since it means discovery broke.
//
// berth is two Go modules: the root and sdk/, a module of its own that
// `./...` in the root does not descend into. Each -C names a module root in
// which the package patterns are matched (the default is the current
// directory); make fuzz-short passes -C . -C sdk, and each module named
// must have targets.
//
// Usage: go run ./internal/fuzzshort [-fuzztime 3s] [-minimizetime 1s] [-C dir]... [packages]
package main
