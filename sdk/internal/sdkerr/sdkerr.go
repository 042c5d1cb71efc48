package sdkerr

import (
	"fmt"
	"sort"
	"sync"

	"google.golang.org/grpc/codes"
)

// Error is a sentinel error of sdk/. Compare with errors.Is; the value is a
// pointer, so two sentinels with the same text are still different errors.
type Error struct {
	code   codes.Code
	reason string
	msg    string
}

// registry maps each reason to its sentinel. New fills it while packages
// are initialised (sentinels are package-level variables), so reads later
// need no lock; the mutex only keeps a New called elsewhere honest.
var registry = struct {
	sync.RWMutex
	byReason map[string]*Error
}{byReason: map[string]*Error{}}

// New returns a sentinel whose Error is msg, whose gRPC code is code and
// whose wire reason is reason (upper-case words, e.g. "TASK_NOT_FOUND";
// reasons are append-only: a client that does not know one just sees the
// code). It panics when code is OK or Unknown or not a gRPC code, when
// reason is empty, or when another sentinel already has reason: the panic
// fires while the declaring package is initialised, so no test run can miss
// it.
func New(code codes.Code, reason, msg string) error {
	if code == codes.OK || code == codes.Unknown || code > codes.Unauthenticated {
		panic(fmt.Sprintf("sdkerr.New(%s, %q, %q): a sentinel needs a code other than OK and Unknown", code, reason, msg))
	}
	if reason == "" {
		panic(fmt.Sprintf("sdkerr.New(%s, %q, %q): a sentinel needs a wire reason", code, reason, msg))
	}
	e := &Error{code: code, reason: reason, msg: msg}
	registry.Lock()
	defer registry.Unlock()
	if other, ok := registry.byReason[reason]; ok {
		panic(fmt.Sprintf("sdkerr.New(%s, %q, %q): reason already taken by %q", code, reason, msg, other.msg))
	}
	registry.byReason[reason] = e
	return e
}

// Error returns the sentinel's message.
func (e *Error) Error() string { return e.msg }

// GRPCCode returns the code the sentinel crosses the plugin wire with, and
// the code berth's API answers with when a task driver's error reaches it.
func (e *Error) GRPCCode() codes.Code { return e.code }

// Reason returns the name of the sentinel on the wire.
func (e *Error) Reason() string { return e.reason }

// All returns every sentinel declared so far, ordered by reason: for tests
// that check each one crosses the wire.
func All() []error {
	registry.RLock()
	defer registry.RUnlock()
	reasons := make([]string, 0, len(registry.byReason))
	for r := range registry.byReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	out := make([]error, len(reasons))
	for i, r := range reasons {
		out[i] = registry.byReason[r]
	}
	return out
}

// ByReason returns the sentinel whose reason is reason, or nil when no
// package linked into this program declared one (a newer plugin's reason).
func ByReason(reason string) error {
	registry.RLock()
	defer registry.RUnlock()
	if e, ok := registry.byReason[reason]; ok {
		return e
	}
	return nil
}
