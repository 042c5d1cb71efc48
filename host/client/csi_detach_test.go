package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/volumehooks"
)

// NodeDetachVolume hands the volume to the volume hooks' detach with the
// call's deadline less the answer's slack, answers what it did, and
// passes its refusals on with their codes; a call for another node, or
// on a client without volume hooks, is refused.
func TestNodeDetachVolume(t *testing.T) {
	const node = "5e0c8f5e-0000-4000-8000-000000000001"
	var gotVolume string
	var gotUsers []volumehooks.DetachUser
	var left time.Duration
	r := &clientCSI{nodeID: node, detach: func(ctx context.Context, volumeID string, users []volumehooks.DetachUser) (volumehooks.DetachResult, error) {
		gotVolume, gotUsers = volumeID, users
		if dl, ok := ctx.Deadline(); ok {
			left = time.Until(dl)
		}
		if volumeID == "busy" {
			return volumehooks.DetachResult{}, fmt.Errorf("detaching volume %q from node %s: %w: alloc a1", volumeID, node, volumehooks.ErrDetachInUse)
		}
		return volumehooks.DetachResult{PluginID: "hostpath", Allocs: []string{"a1"}, Claims: []string{"c1"}, Unstaged: true,
			Users: []volumehooks.DetachUserResult{
				{User: users[0], Outcome: volumehooks.DetachDone},
				{User: users[1], Outcome: volumehooks.DetachNotHeld},
				{User: users[2], Outcome: volumehooks.DetachFailed, Err: errors.New("detaching volume \"data\": teardown of alloc a3: device busy")},
			}}, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	users := []*pb.CSINodeDetachUser{{ClaimId: "k1", AllocId: "a1"}, {ClaimId: "c1"}, {ClaimId: "k3", AllocId: "a3"}}
	resp, err := r.NodeDetachVolume(ctx, &pb.CSINodeDetachRequest{NodeId: node, VolumeId: "data", Users: users})
	if err != nil {
		t.Fatal(err)
	}
	if gotVolume != "data" || resp.GetPluginId() != "hostpath" || len(resp.GetAllocIds()) != 1 || len(resp.GetClaimIds()) != 1 || !resp.GetUnstaged() {
		t.Fatalf("detach of %q answered %v", gotVolume, resp)
	}
	if len(gotUsers) != 3 || gotUsers[0] != (volumehooks.DetachUser{ClaimID: "k1", AllocID: "a1"}) || gotUsers[1] != (volumehooks.DetachUser{ClaimID: "c1"}) {
		t.Fatalf("the hooks were given users %+v", gotUsers)
	}
	rs := resp.GetResults()
	if len(rs) != 3 || rs[0].GetOutcome() != pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_DONE ||
		rs[1].GetOutcome() != pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_NOT_HELD || rs[1].GetUser().GetClaimId() != "c1" ||
		rs[2].GetOutcome() != pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_FAILED || !strings.Contains(rs[2].GetError(), "device busy") {
		t.Fatalf("per-user results %v", rs)
	}
	if left <= 0 || left > time.Minute-detachAnswerSlack {
		t.Fatalf("the hooks' detach had %s of the call's minute, want it less the %s slack", left, detachAnswerSlack)
	}

	_, err = r.NodeDetachVolume(ctx, &pb.CSINodeDetachRequest{NodeId: node, VolumeId: "busy"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "alloc a1") {
		t.Fatalf("refused detach: %v, want FailedPrecondition naming the alloc", err)
	}
	_, err = r.NodeDetachVolume(ctx, &pb.CSINodeDetachRequest{NodeId: "other", VolumeId: "data"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "reached node "+node) {
		t.Fatalf("detach for another node: %v", err)
	}
	none := &clientCSI{nodeID: node}
	if _, err := none.NodeDetachVolume(ctx, &pb.CSINodeDetachRequest{NodeId: node, VolumeId: "data"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("detach on a client without volume hooks: %v, want FailedPrecondition", err)
	}
}

// An alloc the servers stopped whose task is still being killed (it
// ignores the stop signal, kill_timeout not over) still holds its
// volumes: a detach or the start's sweep must not unpublish under it.
// Terminal as the servers see it is not enough; its tasks must be dead
// and its Postrun reached.
func TestStoppingAllocStillHoldsItsVolumes(t *testing.T) {
	f := newFakeServer(t)
	n := newNode(t, t.TempDir(), f.addr, true)
	j := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "web", Driver: "mock", KillTimeoutMs: 60_000,
		Config: sdk.ConfigMap{"ignore_stop_signal": sdk.BoolValue(true)}})
	f.place(allocOf("a1", j), j)
	waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
	if !n.c.allocHoldsVolumes("a1") {
		t.Fatal("a running alloc does not hold its volumes")
	}
	f.stop("a1")
	testutil.WaitFor(t, generous, func() error {
		if n.c.allocLive("a1") {
			return errors.New("the runner has not taken the stop yet")
		}
		return nil
	})
	if st := n.c.mustRunner(t, "a1").TaskStates()["web"].GetState(); st == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		t.Fatalf("task %s before its kill timeout", st)
	}
	if !n.c.allocHoldsVolumes("a1") {
		t.Fatal("a stopped alloc whose task still runs does not hold its volumes: a detach would unpublish under it")
	}
	if n.c.allocHoldsVolumes("gone") {
		t.Fatal("an alloc the client does not run holds volumes")
	}
}

func (c *Client) mustRunner(t *testing.T, allocID string) interface {
	TaskStates() map[string]*pb.TaskState
} {
	t.Helper()
	r, err := c.runner(allocID)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
