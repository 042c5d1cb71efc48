// Command importcheck enforces the import rules of DESIGN.md; `make check`
// runs it on the repository root. It reads source with go/parser, so it
// needs no build and reports every violation with file and line:
//
//   - fsm/ and host/scheduler/ do no I/O and read no clock or randomness:
//     no net, os, math/rand, crypto/rand, syscall, golang.org/x/sys (nor
//     their subpackages), no time.Now and friends, no dot import of time.
//   - sdk/ imports nothing of berth outside sdk/, in its tests too: it is a
//     module of its own (berth.dev/berth/sdk), walked here with the rest.
//   - packages outside host/ do not import host/ (volumehooks among them),
//     except the programs that drive the whole product: the root main
//     package, bench and the node simulator bench/nodesim.
//   - host/client/... imports neither fsm nor host/scheduler.
//   - the CSI library, csi/..., imports nothing under builtin/.
//   - leaf packages (rpc/, csi/, internal/ but testutil and fuzzshort,
//     volumehooks/, taskdrivers/, sdk/) do not import
//     github.com/hashicorp/raft; the server core and fsm may.
//   - nothing imports bench, not even a test.
//
// Test files of fsm/ and host/scheduler/ may use the clock and the
// filesystem; test files are exempt from the host/, client, csi and raft
// rules, since a test links nothing into the product. The rules name directories, so the check refuses a root that
// is not the berth module or that has no fsm/ or sdk/ package: a rename
// must not turn the check into a silent pass. host/scheduler/ is not
// required, so its rule is ready before the package exists.
package main
