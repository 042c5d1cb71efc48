package fsm_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil/claimmodel"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// The claim machine checked for linearizability: goroutines claim and
// release volumes concurrently through a real raft (one server, in-memory
// transport, the FSM's batched apply), every command's call and return
// recorded, and porcupine searches for a sequential order of the history
// that a model of claims per access mode, written independently of
// rules.CheckClaim (internal/testutil/claimmodel, which the fault suite
// shares), accepts. A violation is a history no order explains: two
// writers on a single-writer volume both told yes, a claim refused though
// the volume was free at every moment of its call, a release of a held
// claim refused.

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
	run := func(client int, op claimmodel.Op) codes.Code {
		var typ fsm.MessageType
		var msg proto.Message
		switch op.Kind {
		case "claim":
			mode := pb.ClaimMode_CLAIM_MODE_READ
			if op.Write {
				mode = pb.ClaimMode_CLAIM_MODE_WRITE
			}
			typ, msg = fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{Id: op.ID, VolumeId: op.Volume, NodeId: op.Node,
				Operator: true, Mode: mode, AccessMode: op.Access, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}
		case "release":
			typ, msg = fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: op.ID}
		case "detach":
			typ, msg = fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{
				{ClaimId: op.ID, State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: op.Node}}}
		case "free":
			typ, msg = fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{
				{ClaimId: op.ID, State: pb.ClaimState_CLAIM_STATE_FREED}}}
		}
		call := now()
		err := apply(typ, msg)
		ret := now()
		code := errcode.Code(err)
		if code == codes.Internal || code == codes.Unknown || code == codes.Canceled {
			failed.Add(1)
			t.Errorf("client %d: %s %s: %v", client, op.Kind, op.ID, err)
		}
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: op, Call: call, Output: claimmodel.Result{Code: code}, Return: ret})
		mu.Unlock()
		return code
	}

	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(1, uint64(c)))
			type held struct {
				op    claimmodel.Op
				stage string
			}
			var mine []held
			var last claimmodel.Op
			for i := range opsPerClient {
				switch x := rng.IntN(10); {
				case len(mine) > 0 && x < 5:
					// Move one of this client's claims on a step, now and
					// then proposing the same step twice.
					k := rng.IntN(len(mine))
					h := &mine[k]
					op := h.op
					op.Kind = map[string]string{"claim": "release", "release": "detach", "detach": "free"}[h.stage]
					code := run(c, op)
					if rng.IntN(10) == 0 {
						run(c, op)
					}
					if code == codes.FailedPrecondition && op.Kind == "free" {
						// Freed at its detach, then made again by a retried
						// claim: it is ready once more.
						h.stage = "claim"
						continue
					}
					if code != codes.OK {
						continue
					}
					h.stage = op.Kind
					if op.Kind == "free" {
						mine = slices.Delete(mine, k, k+1)
					}
				case last.ID != "" && x == 9:
					// The last claim proposed again (a retried request).
					if run(c, last) == codes.OK && !slices.ContainsFunc(mine, func(h held) bool { return h.op.ID == last.ID }) {
						mine = append(mine, held{op: last, stage: "claim"})
					}
				default:
					v := rng.IntN(len(porcupineVolumes))
					op := claimmodel.Op{Kind: "claim", Volume: "v" + strconv.Itoa(v), ID: fmt.Sprintf("c%d-%d", c, i),
						Node: []string{"n1", "n2"}[rng.IntN(2)], Write: rng.IntN(3) > 0, Access: porcupineVolumes[v]}
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
		if c := op.Output.(claimmodel.Result).Code; c != codes.OK {
			res = c.String()
		}
		counts[op.Input.(claimmodel.Op).Kind+" "+res]++
	}
	result, info := porcupine.CheckOperationsVerbose(claimmodel.Model, history, time.Minute)
	t.Logf("porcupine: %d operations by %d clients on %d volumes (%v): %s", len(history), clients, len(porcupineVolumes), counts, result)
	if result != porcupine.Ok {
		path := t.TempDir() + "/claims.html"
		if err := porcupine.VisualizePath(claimmodel.Model, info, path); err != nil {
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
	w1 := claimmodel.Op{Kind: "claim", Volume: "v", ID: "a", Node: "n1", Write: true, Access: snw}
	w2 := claimmodel.Op{Kind: "claim", Volume: "v", ID: "b", Node: "n1", Write: true, Access: snw}
	for _, tc := range []struct {
		second codes.Code
		want   porcupine.CheckResult
	}{{codes.OK, porcupine.Illegal}, {codes.ResourceExhausted, porcupine.Ok}} {
		history := []porcupine.Operation{
			{ClientId: 0, Input: w1, Call: 0, Output: claimmodel.Result{Code: codes.OK}, Return: 10},
			{ClientId: 1, Input: w2, Call: 20, Output: claimmodel.Result{Code: tc.second}, Return: 30},
		}
		if got := porcupine.CheckOperationsTimeout(claimmodel.Model, history, time.Second); got != tc.want {
			t.Errorf("second writer answered %s: history is %s, want %s", tc.second, got, tc.want)
		}
	}
}
