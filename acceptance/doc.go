// Package acceptance runs berth end to end: real `berth` processes on
// 127.0.0.1, started from config files, killed with SIGKILL and restarted on
// their data dirs, driven through the HTTP API and the CLI.
//
// The tests build the berth binary once (TestMain) unless BERTH_BIN names
// one. `make test` runs one round of each scenario; `make acceptance` sets
// BERTH_ACCEPTANCE_LONG=1 for repeated failovers. Only processes the tests
// started are ever signalled, by PID.
package acceptance
