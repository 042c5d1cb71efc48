package server

import (
	"net"
	"testing"

	"google.golang.org/grpc"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

func methodNames(ms []grpc.MethodDesc) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.MethodName
	}
	return out
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// nodeRegister is the raft command registering n.
func nodeRegister(n *pb.Node) (fsm.MessageType, *pb.NodeRegisterCommand) {
	n.Status = pb.NodeStatus_NODE_STATUS_READY
	return fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n}
}

// raftFirstIndex is the oldest entry still in the leader's log.
func (s *Server) raftFirstIndex() (uint64, error) { return s.logs.FirstIndex() }
