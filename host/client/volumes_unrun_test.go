package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// heartbeatFor keeps node nodeID alive while its client is stopped, as a
// client slow to fetch its allocs would, so the reaper does not free its
// claims as a down node's. It stops when the returned function is called.
func (e *volumeEnv) heartbeatFor(nodeID string) func() {
	ctx, cancel := context.WithCancel(e.ctx)
	// As the node: with the secret its client keeps in the state DB.
	secret, err := e.db.NodeSecret()
	if err != nil {
		e.t.Fatal(err)
	}
	ctx = rpc.WithNodeSecret(ctx, secret)
	done := make(chan struct{})
	nodes := pb.NewNodesClient(e.conn)
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if _, err := nodes.Heartbeat(ctx, &pb.NodeHeartbeatRequest{NodeId: nodeID}); err != nil && ctx.Err() == nil {
				e.t.Errorf("heartbeat for node %s: %v", nodeID, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// An alloc stopped (or its job purged) before its client ever fetched it
// holds a claim reserved on the node at placement and moved to releasing
// by the stop; no alloc runner, so no volume hook, would report it off the
// node. The client, seeing the stopped alloc it never ran, takes its
// claim down through the volume teardown (nothing was staged or
// published) and reports it node-detached, which frees it, and reports
// the alloc complete so it can be collected.
func TestClaimOfAnAllocStoppedBeforeTheClientRanItIsFreed(t *testing.T) {
	for _, purge := range []bool{false, true} {
		t.Run(fmt.Sprintf("purge=%v", purge), func(t *testing.T) {
			e := newVolumeEnv(t)
			nodeID := e.c.NodeID()
			e.stop()
			stopBeats := e.heartbeatFor(nodeID)

			task := &pb.Task{Name: "web", Driver: "raw_exec", Resources: &pb.TaskResources{CpuMhz: 100, MemoryMb: 64},
				Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/true")}}
			job := mockJob(pb.JobType_JOB_TYPE_SERVICE, task)
			job.Groups[0].Volumes = map[string]*pb.VolumeRequest{"data": {Name: "data", Type: "csi", Source: "vol1",
				AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
			jobs := pb.NewJobsClient(e.conn)
			if _, err := jobs.Register(e.ctx, &pb.JobRegisterRequest{Job: job}); err != nil {
				t.Fatal(err)
			}
			e.waitClaim(pb.ClaimState_CLAIM_STATE_READY)
			resp, err := e.vols.Claims(e.ctx, &pb.VolumeClaimsRequest{VolumeId: "vol1"})
			if err != nil {
				t.Fatal(err)
			}
			allocID := resp.GetClaims()[0].GetAllocId()
			if _, err := jobs.Deregister(e.ctx, &pb.JobDeregisterRequest{JobId: job.GetId(), Purge: purge}); err != nil {
				t.Fatal(err)
			}
			e.waitClaim(pb.ClaimState_CLAIM_STATE_RELEASING)

			e.start()
			stopBeats()
			e.waitClaim(pb.ClaimState_CLAIM_STATE_FREED)
			testutil.WaitFor(t, generous, func() error {
				a, err := e.s.State().AllocByID(nil, allocID)
				if err != nil {
					return err
				}
				if a == nil || a.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE {
					return fmt.Errorf("alloc %s: %v; want client status complete", allocID, a)
				}
				return nil
			})
			if st, pu, up := e.fake.NodeStageVolume.Count(), e.fake.NodePublishVolume.Count(), e.fake.NodeUnpublishVolume.Count(); st != 0 || pu != 0 || up != 0 {
				t.Errorf("stage %d, publish %d, unpublish %d for an alloc never run; want none", st, pu, up)
			}
			if n, err := e.s.State().NodeByID(nil, nodeID); err != nil || n.GetStatus() != pb.NodeStatus_NODE_STATUS_READY {
				t.Errorf("node %s: %v, %v; want ready all along (else the reaper, not the client, freed the claim)", nodeID, n, err)
			}
		})
	}
}
