package fsm_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// The claim machine checked for linearizability: goroutines claim and
// release volumes concurrently through a real raft (one server, in-memory
// transport, the FSM's batched apply), every command's call and return
// recorded, and porcupine searches for a sequential order of the history
// that a model of claims per access mode, written here independently of
// rules.CheckClaim, accepts. A violation is a history no order explains: two
// writers on a single-writer volume both told yes, a claim refused though
// the volume was free at every moment of its call, a release of a held
// claim refused.

// claimOp is one operation of the history.
type claimOp struct {
	kind   string // claim, release, detach, free
	volume string
	id     string
	node   string
	write  bool
	access pb.VolumeAccessMode
}

// claimResult is what the FSM answered: ok, or the refusal's gRPC code.
type claimResult struct {
	code codes.Code
}

// modelClaim is a claim the model holds: held until freed.
type modelClaim struct {
	id, node string
	write    bool
	stage    pb.ClaimState
}

// modelState is one volume's claims, sorted by ID; never mutated.
type modelState []modelClaim

// modelLimits is the model's own reading of DESIGN's max claims by access
// mode: may claims be on several nodes, may they write, at most how many
// writers and claims (0: any).
func modelLimits(m pb.VolumeAccessMode) (multiNode, write bool, maxWriters, maxClaims int) {
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

// modelFits reports whether a new claim fits beside the held ones.
func modelFits(s modelState, op claimOp) bool {
	multiNode, write, maxWriters, maxClaims := modelLimits(op.access)
	if op.write && !write {
		return false
	}
	writers, claims := 0, len(s)+1
	if op.write {
		writers++
	}
	for _, c := range s {
		if !multiNode && c.node != op.node {
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

func (s modelState) find(id string) int {
	return slices.IndexFunc(s, func(c modelClaim) bool { return c.id == id })
}

// step is the model's sequential specification of one operation.
func (s modelState) step(op claimOp, res claimResult) (bool, modelState) {
	i := s.find(op.id)
	ok := res.code == codes.OK
	switch op.kind {
	case "claim":
		if i >= 0 {
			return ok, s // the same claim proposed again: nothing changes
		}
		if _, write, _, _ := modelLimits(op.access); op.write && !write {
			return res.code == codes.InvalidArgument, s // no writer ever, whatever is held
		}
		if !modelFits(s, op) {
			return res.code == codes.ResourceExhausted, s
		}
		if !ok {
			return false, s
		}
		n := append(slices.Clone(s), modelClaim{id: op.id, node: op.node, write: op.write, stage: pb.ClaimState_CLAIM_STATE_READY})
		slices.SortFunc(n, func(a, b modelClaim) int { return strings.Compare(a.id, b.id) })
		return true, n
	case "release", "detach":
		from, to := pb.ClaimState_CLAIM_STATE_READY, pb.ClaimState_CLAIM_STATE_RELEASING
		if op.kind == "detach" {
			from, to = pb.ClaimState_CLAIM_STATE_RELEASING, pb.ClaimState_CLAIM_STATE_NODE_DETACHED
		}
		switch {
		case i < 0:
			return ok, s // a freed (or unknown) claim's release or detach is done
		case s[i].stage == to:
			return ok, s
		case s[i].stage != from:
			return res.code == codes.FailedPrecondition, s
		case !ok:
			return false, s
		}
		if op.kind == "detach" {
			// No controller publish: nothing to wait for, freed at once.
			return true, slices.Delete(slices.Clone(s), i, i+1)
		}
		n := slices.Clone(s)
		n[i].stage = to
		return true, n
	case "free":
		if i < 0 {
			return ok, s
		}
		if s[i].stage != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
			return res.code == codes.FailedPrecondition, s
		}
		return ok, slices.Delete(slices.Clone(s), i, i+1)
	}
	return false, s
}

// claimModel is the porcupine model, one partition per volume.
var claimModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byVolume := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			v := op.Input.(claimOp).volume
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
	Init: func() any { return modelState(nil) },
	Step: func(state, input, output any) (bool, any) {
		return state.(modelState).step(input.(claimOp), output.(claimResult))
	},
	Equal: func(a, b any) bool {
		return slices.Equal(a.(modelState), b.(modelState))
	},
	DescribeOperation: func(input, output any) string {
		op := input.(claimOp)
		return fmt.Sprintf("%s %s %s node=%s write=%t -> %s", op.kind, op.volume, op.id, op.node, op.write, output.(claimResult).code)
	},
}

// porcupineVolumes are the volumes the check claims, one per access mode
// that limits claims (multi-node-multi-writer limits nothing).
var porcupineVolumes = []pb.VolumeAccessMode{
	pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
	pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER,
	pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER,
	pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_READER_ONLY,
	pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_SINGLE_WRITER,
	pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY,
}

// TestClaimsLinearizable runs the concurrent claim/release history and
// checks it. Short by default (a few seconds under -race); set
// BERTH_PORCUPINE_LONG=1 for a longer run. It logs the operations checked.
func TestClaimsLinearizable(t *testing.T) {
	clients, opsPerClient := 8, 150
	if os.Getenv("BERTH_PORCUPINE_LONG") != "" {
		clients, opsPerClient = 32, 1000
	}
	f := fsm.New(testLogger(t))
	r := newSingleRaft(t, f)
	ctx := t.Context()
	apply := func(typ fsm.MessageType, msg proto.Message) error {
		_, err := fsm.ResultOf(ctx, r.Apply(mustEncode(t, typ, msg), 30*time.Second))
		return err
	}
	for _, n := range []string{"n1", "n2"} {
		if err := apply(fsm.NodeRegister, registerCmd(n, n, pb.NodeStatus_NODE_STATUS_READY)); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range porcupineVolumes {
		v := &pb.Volume{Id: "v" + strconv.Itoa(i), PluginId: "nfs", Capabilities: []*pb.VolumeCapability{
			{AccessMode: m, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}
		if err := apply(fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: v}); err != nil {
			t.Fatal(err)
		}
	}

	// A logical clock gives porcupine the real-time order it needs: an
	// operation that returned before another was called has the smaller
	// stamp, and no wall clock enters the state machine's package.
	var clock atomic.Int64
	now := func() int64 { return clock.Add(1) }
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		failed  atomic.Int32
	)
	run := func(client int, op claimOp) codes.Code {
		var typ fsm.MessageType
		var msg proto.Message
		switch op.kind {
		case "claim":
			mode := pb.ClaimMode_CLAIM_MODE_READ
			if op.write {
				mode = pb.ClaimMode_CLAIM_MODE_WRITE
			}
			typ, msg = fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{Id: op.id, VolumeId: op.volume, NodeId: op.node,
				Operator: true, Mode: mode, AccessMode: op.access, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}
		case "release":
			typ, msg = fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: op.id}
		case "detach":
			typ, msg = fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{
				{ClaimId: op.id, State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: op.node}}}
		case "free":
			typ, msg = fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{
				{ClaimId: op.id, State: pb.ClaimState_CLAIM_STATE_FREED}}}
		}
		call := now()
		err := apply(typ, msg)
		ret := now()
		code := errcode.Code(err)
		if code == codes.Internal || code == codes.Unknown || code == codes.Canceled {
			failed.Add(1)
			t.Errorf("client %d: %s %s: %v", client, op.kind, op.id, err)
		}
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: op, Call: call, Output: claimResult{code}, Return: ret})
		mu.Unlock()
		return code
	}

	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(1, uint64(c)))
			type held struct {
				op    claimOp
				stage string
			}
			var mine []held
			var last claimOp
			for i := range opsPerClient {
				switch x := rng.IntN(10); {
				case len(mine) > 0 && x < 5:
					// Move one of this client's claims on a step, now and
					// then proposing the same step twice.
					k := rng.IntN(len(mine))
					h := &mine[k]
					op := h.op
					op.kind = map[string]string{"claim": "release", "release": "detach", "detach": "free"}[h.stage]
					code := run(c, op)
					if rng.IntN(10) == 0 {
						run(c, op)
					}
					if code == codes.FailedPrecondition && op.kind == "free" {
						// Freed at its detach, then made again by a retried
						// claim: it is ready once more.
						h.stage = "claim"
						continue
					}
					if code != codes.OK {
						continue
					}
					h.stage = op.kind
					if op.kind == "free" {
						mine = slices.Delete(mine, k, k+1)
					}
				case last.id != "" && x == 9:
					// The last claim proposed again (a retried request).
					if run(c, last) == codes.OK && !slices.ContainsFunc(mine, func(h held) bool { return h.op.id == last.id }) {
						mine = append(mine, held{op: last, stage: "claim"})
					}
				default:
					v := rng.IntN(len(porcupineVolumes))
					op := claimOp{kind: "claim", volume: "v" + strconv.Itoa(v), id: fmt.Sprintf("c%d-%d", c, i),
						node: []string{"n1", "n2"}[rng.IntN(2)], write: rng.IntN(3) > 0, access: porcupineVolumes[v]}
					last = op
					if run(c, op) == codes.OK {
						mine = append(mine, held{op: op, stage: "claim"})
					}
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}

	counts := map[string]int{}
	for _, op := range history {
		res := "ok"
		if c := op.Output.(claimResult).code; c != codes.OK {
			res = c.String()
		}
		counts[op.Input.(claimOp).kind+" "+res]++
	}
	result, info := porcupine.CheckOperationsVerbose(claimModel, history, time.Minute)
	t.Logf("porcupine: %d operations by %d clients on %d volumes (%v): %s", len(history), clients, len(porcupineVolumes), counts, result)
	if result != porcupine.Ok {
		path := t.TempDir() + "/claims.html"
		if err := porcupine.VisualizePath(claimModel, info, path); err != nil {
			t.Logf("visualizing: %v", err)
		}
		t.Fatalf("claim history is %s against the model of claims per access mode (see %s)", result, path)
	}
	if counts["claim ok"] == 0 || counts["claim ResourceExhausted"] == 0 || counts["free ok"] == 0 {
		t.Fatalf("the history exercised too little to check anything: %v", counts)
	}
}

// TestClaimModelCatchesDoubleWriter shows the model can fail: a history in
// which two writers were both granted a single-node-writer volume, one
// after the other, is illegal; with the second refused it is fine.
func TestClaimModelCatchesDoubleWriter(t *testing.T) {
	snw := pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER
	w1 := claimOp{kind: "claim", volume: "v", id: "a", node: "n1", write: true, access: snw}
	w2 := claimOp{kind: "claim", volume: "v", id: "b", node: "n1", write: true, access: snw}
	for _, tc := range []struct {
		second codes.Code
		want   porcupine.CheckResult
	}{{codes.OK, porcupine.Illegal}, {codes.ResourceExhausted, porcupine.Ok}} {
		history := []porcupine.Operation{
			{ClientId: 0, Input: w1, Call: 0, Output: claimResult{codes.OK}, Return: 10},
			{ClientId: 1, Input: w2, Call: 20, Output: claimResult{tc.second}, Return: 30},
		}
		if got := porcupine.CheckOperationsTimeout(claimModel, history, time.Second); got != tc.want {
			t.Errorf("second writer answered %s: history is %s, want %s", tc.second, got, tc.want)
		}
	}
}
