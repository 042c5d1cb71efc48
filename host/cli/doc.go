// Package cli builds berth's command line: `berth run` starts an agent, the
// other commands talk to an agent's HTTP API (address from -address or
// BERTH_ADDR). `berth builtin ...` are the entry points of the plugins that
// ship in the binary; the agent re-executes itself with them so built-in
// plugins cross the same process boundary as third-party ones.
//
// Each command lives in its own file; Main assembles them. Exit codes are
// one scheme for every command (app.go, README "Exit codes"): 0 success, 1
// error (on stderr), 2 usage error (usageError, and urfave/cli's flag and
// unknown-command errors, turned into the same), 3 when a command that
// follows its write's evaluation (job run, revert and stop, alloc stop)
// wrote, but the evaluation failed or could not place every alloc, or an
// alloc failed (after printing why). `job plan` exits as Nomad's does: 0 when no alloc would be
// created or destroyed, 1 when some would, 255 on errors.
//
// Flags may follow a command's arguments: urfave/cli stops reading flags
// at the first argument, so flagsFirst (args.go) moves the command's flags
// ahead of its arguments before the line is parsed; "--" still ends the
// flags.
//
// Objects are named by ID or unique ID prefix (findID: jobs, allocs,
// evaluations, nodes, volumes); an ambiguous prefix lists the candidates.
// Job files are read by host/jobspec, volume files by host/volumespec
// (checked with positions before anything is sent). CSI secrets given on
// the command line (-secret key=value) are never printed back, not even in
// a usage error. `job run` follows the evaluation and then the
// allocs it placed with blocking queries, each on the index of the
// previous answer, so it never sleeps or polls (monitor.go). Every
// command's -json prints rpc/apijson's output, byte for byte what the API
// sends.
package cli
