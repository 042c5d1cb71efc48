// Package claimmodel is the porcupine model of berth's claim machine,
// written independently of internal/rules: a volume's claims per access
// mode, operation by operation. The state machine's linearizability test
// (fsm TestClaimsLinearizable) checks histories of commands against it;
// the fault suite (acceptance/chaos) checks the operator claims clients
// made through the API during faults.
//
// A history's operations are porcupine.Operations with an Op as input and
// a Result as output. Two kinds of result are for histories taken from
// outside the cluster: Uncertain (no answer came: the operation may or may
// not have taken effect) and Outside (refused for a reason the model does
// not decide, such as the node being down: nothing changed). Give an
// uncertain operation a return time after every other operation's.
package claimmodel

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/pb"
)

// The kinds of Op.
const (
	// KindClaim claims the volume on Op.Node, writing or not.
	KindClaim = "claim"
	// KindRelease moves a ready claim to releasing.
	KindRelease = "release"
	// KindDetach moves a releasing claim to node-detached; with no
	// controller publish held it is freed at once.
	KindDetach = "detach"
	// KindFree frees a node-detached claim.
	KindFree = "free"
	// KindGone is an observation: a read no longer lists the claim, so it
	// was freed between the operation's call and return, from whatever
	// state (the servers free a released claim on their own).
	KindGone = "gone"
)

// Op is one operation of a history.
type Op struct {
	Kind   string
	Volume string
	ID     string
	Node   string
	Write  bool
	Access pb.VolumeAccessMode
}

// Result is what the cluster answered.
type Result struct {
	// Code is ok or the refusal's gRPC code.
	Code codes.Code
	// Uncertain: no answer (a timeout, a lost connection, an unavailable
	// server); the operation may have taken effect.
	Uncertain bool
	// Outside: refused for a reason outside the model (the node is down,
	// its plugin unhealthy); the operation changed nothing.
	Outside bool
}

func (r Result) String() string {
	switch {
	case r.Uncertain:
		return "uncertain"
	case r.Outside:
		return "refused (outside the model): " + r.Code.String()
	}
	return r.Code.String()
}

// claim is a claim the model holds: held until freed.
type claim struct {
	id, node string
	write    bool
	stage    pb.ClaimState
}

// state is one volume's claims, sorted by ID; never mutated.
type state []claim

// Limits is the model's own reading of DESIGN's max claims by access mode:
// may claims be on several nodes, may they write, at most how many writers
// and claims (0: any).
func Limits(m pb.VolumeAccessMode) (multiNode, write bool, maxWriters, maxClaims int) {
	switch m {
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_READER_ONLY:
		return false, false, 0, 0
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER:
		return false, true, 1, 0
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER:
		return false, true, 1, 1
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER:
		return false, true, 0, 0
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY:
		return true, false, 0, 0
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_SINGLE_WRITER:
		return true, true, 1, 0
	}
	return true, true, 0, 0
}

// fits reports whether a new claim fits beside the held ones.
func fits(s state, op Op) bool {
	multiNode, write, maxWriters, maxClaims := Limits(op.Access)
	if op.Write && !write {
		return false
	}
	writers, claims := 0, len(s)+1
	if op.Write {
		writers++
	}
	for _, c := range s {
		if !multiNode && c.node != op.Node {
			return false
		}
		if c.write {
			writers++
		}
	}
	if maxClaims > 0 && claims > maxClaims {
		return false
	}
	return maxWriters == 0 || writers <= maxWriters
}

func (s state) find(id string) int {
	return slices.IndexFunc(s, func(c claim) bool { return c.id == id })
}

// step is the model's sequential specification of one operation.
func (s state) step(op Op, res Result) (bool, state) {
	i := s.find(op.ID)
	ok := res.Code == codes.OK && !res.Uncertain && !res.Outside
	if res.Outside {
		return true, s
	}
	switch op.Kind {
	case KindClaim:
		if i >= 0 {
			return ok || res.Uncertain, s // the same claim proposed again: nothing changes
		}
		if _, write, _, _ := Limits(op.Access); op.Write && !write {
			return res.Uncertain || res.Code == codes.InvalidArgument, s // no writer ever, whatever is held
		}
		if !fits(s, op) {
			return res.Uncertain || res.Code == codes.ResourceExhausted, s
		}
		if !ok && !res.Uncertain {
			return false, s
		}
		n := append(slices.Clone(s), claim{id: op.ID, node: op.Node, write: op.Write, stage: pb.ClaimState_CLAIM_STATE_READY})
		slices.SortFunc(n, func(a, b claim) int { return strings.Compare(a.id, b.id) })
		return true, n
	case KindRelease, KindDetach:
		from, to := pb.ClaimState_CLAIM_STATE_READY, pb.ClaimState_CLAIM_STATE_RELEASING
		if op.Kind == KindDetach {
			from, to = pb.ClaimState_CLAIM_STATE_RELEASING, pb.ClaimState_CLAIM_STATE_NODE_DETACHED
		}
		switch {
		case i < 0:
			return ok || res.Uncertain, s // a freed (or unknown) claim's release or detach is done
		case s[i].stage == to:
			return ok || res.Uncertain, s
		case s[i].stage != from:
			return res.Uncertain || res.Code == codes.FailedPrecondition, s
		case !ok && !res.Uncertain:
			return false, s
		}
		if op.Kind == KindDetach {
			// No controller publish: nothing to wait for, freed at once.
			return true, slices.Delete(slices.Clone(s), i, i+1)
		}
		n := slices.Clone(s)
		n[i].stage = to
		return true, n
	case KindFree:
		if i < 0 {
			return ok || res.Uncertain, s
		}
		if s[i].stage != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
			return res.Uncertain || res.Code == codes.FailedPrecondition, s
		}
		return ok || res.Uncertain, slices.Delete(slices.Clone(s), i, i+1)
	case KindGone:
		if i < 0 {
			return true, s
		}
		return true, slices.Delete(slices.Clone(s), i, i+1)
	}
	return false, s
}

// Model is the porcupine model, one partition per volume.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byVolume := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			v := op.Input.(Op).Volume
			if _, ok := byVolume[v]; !ok {
				order = append(order, v)
			}
			byVolume[v] = append(byVolume[v], op)
		}
		var out [][]porcupine.Operation
		for _, v := range order {
			out = append(out, byVolume[v])
		}
		return out
	},
	Init: func() any { return state(nil) },
	Step: func(st, input, output any) (bool, any) {
		return st.(state).step(input.(Op), output.(Result))
	},
	Equal: func(a, b any) bool {
		return slices.Equal(a.(state), b.(state))
	},
	DescribeOperation: func(input, output any) string {
		op := input.(Op)
		return fmt.Sprintf("%s %s %s node=%s write=%t -> %s", op.Kind, op.Volume, op.ID, op.Node, op.Write, output.(Result))
	},
}
