// Package rules holds the rules that two or more parts of berth must agree
// on, so each is written once: when an alloc is terminal and a node takes
// placements (AllocTerminal, NodeSchedulable), whether allocs fit a node
// (AllocsFit), whether a volume takes a claim (CheckClaim, AccessModeLimitsOf),
// which volume a group's request claims (VolumeID), and the CSI form of a
// volume capability (CSICapability).
//
// The state machine's re-check is the last word on placements and claims,
// the scheduler proposes by the same functions so its plans are not
// refused for a difference of opinion, and the client runs, stops and
// mounts by them. Before this package they lived in fsm and host/scheduler,
// so the client linked the state machine (and go-memdb) to ask whether an
// alloc had stopped.
//
// What belongs here: a pure function (or its sentinel errors and constants)
// that at least two of fsm, host/scheduler, host/server, host/client,
// volumehooks, csi/... and host/cli call, where a difference between two
// copies would be a bug. What does not: anything with state, I/O, a clock,
// randomness or a network (the package is a leaf: it imports rpc/pb,
// rpc/errcode for its sentinels' codes, the protobuf runtime and the CSI
// spec's generated types, and the standard library); a rule only one part
// applies, which stays with that part; and the gRPC code classes, which
// live in rpc/errcode beside the code table, and the one spelling of an
// enum value (pb.EnumWord), which lives beside the enums in rpc/pb so the
// JSON codec uses it without importing anything above rpc/.
//
// Usage: call the functions directly, rules.AllocTerminal(a),
// rules.CheckClaim(v, held, c), rules.VolumeID(req, index). The
// sentinels CheckClaim wraps are the state machine's too (fsm.ErrNoFreeClaim
// is ErrNoFreeClaim), so errors.Is matches either name.
package rules
