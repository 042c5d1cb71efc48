package endpoints

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

const (
	hvNode1 = "11111111-0000-4000-8000-000000000001"
	hvNode2 = "11111111-0000-4000-8000-000000000002"
	hvNode3 = "11111111-0000-4000-8000-000000000003"
)

// hostVolumeState is a state with three nodes: n1 ready with meta
// disk=ssd and a dynamic volume "logs", n2 ready without meta, n3 down.
func hostVolumeState(t *testing.T) *fsm.StateSnapshot {
	t.Helper()
	f := fsm.New(testutil.Logger(t))
	index := uint64(0)
	do := func(mt fsm.MessageType, msg proto.Message) {
		index++
		buf, err := fsm.Encode(mt, msg)
		if err != nil {
			t.Fatal(err)
		}
		if res := f.ApplyLog(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: buf}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	node := func(id string, status pb.NodeStatus, meta map[string]string) *pb.Node {
		return &pb.Node{Id: id, Name: id[len(id)-1:], Status: status, Meta: meta}
	}
	do(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: node(hvNode1, pb.NodeStatus_NODE_STATUS_READY, map[string]string{"disk": "ssd"})})
	do(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: node(hvNode2, pb.NodeStatus_NODE_STATUS_READY, nil)})
	do(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: node(hvNode3, pb.NodeStatus_NODE_STATUS_DOWN, map[string]string{"disk": "ssd"})})
	do(fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: &pb.HostVolume{Id: "v1", Name: "logs", NodeId: hvNode1,
		State: pb.HostVolumeState_HOST_VOLUME_STATE_READY}})
	return f.State().Snapshot()
}

// The node of a new dynamic host volume: the one named, when it can take
// it; else a ready node satisfying the constraints, with the fewest
// dynamic volumes and none of the name; a refusal says why of each node.
func TestPickHostVolumeNode(t *testing.T) {
	snap := hostVolumeState(t)
	ssd := []*pb.Constraint{{Attribute: "${meta.disk}", Operator: "=", Value: "ssd"}}
	for _, tc := range []struct {
		name string
		v    *pb.HostVolume
		want string
		err  string
	}{
		{"fewest volumes", &pb.HostVolume{Name: "data"}, hvNode2, ""},
		{"constraint", &pb.HostVolume{Name: "data", Constraints: ssd}, hvNode1, ""},
		{"named node", &pb.HostVolume{Name: "data", NodeId: hvNode1}, hvNode1, ""},
		{"name taken on the only fitting node", &pb.HostVolume{Name: "logs", Constraints: ssd}, "",
			`host volume "logs": no node can take the host volume: of 3 nodes: [${meta.disk} = ssd (1) node not ready (1) the node has a host volume "logs" (1)]`},
		{"named node down", &pb.HostVolume{Name: "data", NodeId: hvNode3}, "",
			`host volume "data": no node can take the host volume: node ` + hvNode3 + `: node not ready`},
		{"named node unknown", &pb.HostVolume{Name: "data", NodeId: "11111111-0000-4000-8000-000000000009"}, "",
			"node 11111111-0000-4000-8000-000000000009 is not registered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickHostVolumeNode(snap, tc.v)
			if tc.err != "" {
				if !errors.Is(err, ErrNoNodeForHostVolume) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("pick: %q, %v; want an error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("pick: %q, %v; want %s", got, err, tc.want)
			}
		})
	}
}
