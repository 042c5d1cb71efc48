// Package cli builds berth's command line: `berth run` starts an agent, the
// other commands talk to an agent's HTTP API (address from -address or
// BERTH_ADDR). `berth builtin ...` are the entry points of the plugins that
// ship in the binary; the agent re-executes itself with them so built-in
// plugins cross the same process boundary as third-party ones.
//
// Each command lives in its own file; Main assembles them. Commands exit 0 on
// success and 1 on error, with the error on stderr. `job run`, `job
// revert` and `alloc stop` exit 2 when a placement or an alloc failed (after
// printing why); `job plan` exits as Nomad's does: 0 when no alloc would be
// created or destroyed, 1 when some would, 255 on errors.
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
