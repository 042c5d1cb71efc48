// Command importcheck enforces the import rules of DESIGN.md; `make check`
// runs it on the repository root. It reads source with go/parser, so it
// needs no build and reports every violation with file and line:
//
//   - fsm/ and host/scheduler/ do no I/O and read no clock or randomness:
//     no net, os, math/rand, crypto/rand, syscall, golang.org/x/sys (nor
//     their subpackages), no time.Now and friends, no dot import of time.
//   - sdk/ imports nothing of berth outside sdk/, in its tests too, so it
//     can become a module of its own.
//   - packages outside host/ do not import host/, except the programs that
//     drive the whole product: the root main package and bench.
//
// Test files of fsm/ and host/scheduler/ may use the clock and the
// filesystem. The rules name directories, so the check refuses a root that
// is not the berth module or that has no fsm/ or sdk/ package: a rename
// must not turn the check into a silent pass. host/scheduler/ is not
// required, so its rule is ready before the package exists.
package main
