// Package cli builds berth's command line: `berth run` starts an agent, the
// other commands talk to an agent's HTTP API (address from -address or
// BERTH_ADDR). `berth builtin ...` are the entry points of the plugins that
// ship in the binary; the agent re-executes itself with them so built-in
// plugins cross the same process boundary as third-party ones.
//
// Each command lives in its own file; Main assembles them. Commands exit 0 on
// success and 1 on error, with the error on stderr.
package cli
