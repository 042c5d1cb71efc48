package evals

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// A job whose group names a host volume is volume-blocked work: a dynamic
// host volume of that name made ready (a pending one resolved) moves the
// index the feed compares with, and fires the feed's watch, so the
// blocked evaluation is woken.
func TestFeedWatchesHostVolumesOfBlockedJobs(t *testing.T) {
	f := fsm.New(testutil.Logger(t))
	var index uint64
	apply := func(mt fsm.MessageType, msg proto.Message) {
		t.Helper()
		buf, err := fsm.Encode(mt, msg)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if res := f.ApplyLog(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: buf}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	apply(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n1", Name: "n1", Status: pb.NodeStatus_NODE_STATUS_READY}})
	apply(fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "db", Name: "db", Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "g", Count: 1, Volumes: map[string]*pb.VolumeRequest{"d": {Type: "host", Source: "data"}}}}}})
	vol := &pb.HostVolume{Id: "hv1", Name: "data", NodeId: "n1", State: pb.HostVolumeState_HOST_VOLUME_STATE_PENDING}
	apply(fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: vol})

	snap := f.State().Snapshot()
	before, err := volumesChangedAt(snap)
	if err != nil {
		t.Fatal(err)
	}
	ws := memdb.NewWatchSet()
	claims, err := watchJobVolumes(ws, snap, "db")
	if err != nil || !claims {
		t.Fatalf("a job with a host volume: watched %v (%v), want true", claims, err)
	}

	ready := proto.CloneOf(vol)
	ready.State = pb.HostVolumeState_HOST_VOLUME_STATE_READY
	apply(fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: ready})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ws.WatchCtx(ctx); err != nil {
		t.Fatalf("the volume made ready did not fire the feed's watch: %v", err)
	}
	after, err := volumesChangedAt(f.State().Snapshot())
	if err != nil || after <= before {
		t.Fatalf("volumes changed at %d, then %d (%v): want the host volume's change counted", before, after, err)
	}
}
