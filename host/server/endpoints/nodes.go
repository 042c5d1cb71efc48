package endpoints

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc/pb"
)

// nodesEndpoint serves client registration, heartbeats and node reads.
type nodesEndpoint struct {
	pb.UnimplementedNodesServer
	s *api
}

func (e *nodesEndpoint) Register(ctx context.Context, req *pb.NodeRegisterRequest) (*pb.NodeRegisterResponse, error) {
	s := e.s
	n := req.GetNode()
	if err := validateNode(n); err != nil {
		return nil, err
	}
	n = proto.Clone(n).(*pb.Node)
	now := s.Clock.Now().UnixNano()
	n.Status = pb.NodeStatus_NODE_STATUS_READY
	n.StatusDescription = "registered"
	n.StatusUpdatedAt = now
	n.RegisteredAt = now
	checked, err := s.identify(ctx, n)
	if err != nil {
		return nil, err
	}
	evals, err := evals.ForNode(s.State().Snapshot(), s.Clock.Now(), n.GetId(), pb.EvalTrigger_EVAL_TRIGGER_NODE_UPDATE, true)
	if err != nil {
		return nil, err
	}
	idx, err := s.Apply(ctx, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n, Evals: evals, CheckedSecretHash: checked})
	if err != nil {
		return nil, fmt.Errorf("registering node %s: %w", n.GetId(), err)
	}
	ttl := s.Heartbeats.TTL()
	s.Heartbeats.Reset(n.GetId(), ttl)
	if err := promotePendingHostVolumes(ctx, s, n); err != nil {
		s.Logger.Warn("a pending host volume its node reports stays pending", "error", err)
	}
	held, err := heldHostVolumeIDs(s, n.GetId())
	if err != nil {
		return nil, err
	}
	return &pb.NodeRegisterResponse{
		Meta:           &pb.WriteMeta{Index: idx},
		HeartbeatTtlMs: ttl.Milliseconds(),
		Servers:        s.serverRPCAddrs(),
		// Read on the leader after the registration applied: every
		// volume's record precedes the node's making it.
		HostVolumeIds:    held,
		HostVolumesKnown: true,
	}, nil
}

func validateNode(n *pb.Node) error {
	switch {
	case n == nil:
		return status.Error(codes.InvalidArgument, "node: missing")
	case !uuid.Valid(n.GetId()):
		return status.Errorf(codes.InvalidArgument, "node.id: %q is not a valid id", n.GetId())
	case n.GetName() == "":
		return status.Errorf(codes.InvalidArgument, "node %s: name is required", n.GetId())
	}
	return nil
}

func (e *nodesEndpoint) Heartbeat(ctx context.Context, req *pb.NodeHeartbeatRequest) (*pb.NodeHeartbeatResponse, error) {
	s := e.s
	node, err := s.State().NodeByID(nil, req.GetNodeId())
	if err != nil {
		return nil, err
	}
	if node == nil {
		return nil, fmt.Errorf("heartbeat from node %s: %w", req.GetNodeId(), fsm.ErrNodeNotFound)
	}
	ttl := s.Heartbeats.TTL()
	if err := s.Heartbeats.Heartbeat(ctx, node.GetId(), ttl); err != nil {
		return nil, err
	}
	return &pb.NodeHeartbeatResponse{
		HeartbeatTtlMs: ttl.Milliseconds(),
		Servers:        s.serverRPCAddrs(),
		RegisterAgain:  s.wantsSecret(ctx, node),
	}, nil
}

func (e *nodesEndpoint) List(ctx context.Context, req *pb.NodeListRequest) (*pb.NodeListResponse, error) {
	n, err := PerPage(req.GetQuery())
	if err != nil {
		return nil, err
	}
	var keep func(*pb.Node) bool
	if want := req.GetStatus(); want != pb.NodeStatus_NODE_STATUS_UNSPECIFIED {
		if _, known := pb.NodeStatus_name[int32(want)]; !known {
			return nil, status.Errorf(codes.InvalidArgument, "node list: unknown status filter %d", want)
		}
		keep = func(node *pb.Node) bool { return node.GetStatus() == want }
	}
	resp := &pb.NodeListResponse{}
	var next string
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		nodes, nextID, err := st.NodesPage(ws, req.GetQuery().GetNextToken(), n, keep)
		if err != nil {
			return 0, err
		}
		resp.Nodes, next = nodes, nextID
		return st.Index(fsm.TableNodes)
	})
	if err != nil {
		return nil, err
	}
	meta.NextToken = next
	resp.Meta = meta
	for i, n := range resp.Nodes {
		resp.Nodes[i] = redactNode(n)
	}
	return resp, nil
}

func (e *nodesEndpoint) Get(ctx context.Context, req *pb.NodeGetRequest) (*pb.NodeGetResponse, error) {
	resp := &pb.NodeGetResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		node, err := st.NodeByID(ws, req.GetNodeId())
		if err != nil {
			return 0, err
		}
		resp.Node = node
		if node != nil {
			return node.GetModifyIndex(), nil
		}
		return st.Index(fsm.TableNodes)
	})
	if err != nil {
		return nil, err
	}
	if resp.Node == nil {
		return nil, fmt.Errorf("node %s: %w", req.GetNodeId(), fsm.ErrNodeNotFound)
	}
	resp.Meta = meta
	resp.Node = redactNode(resp.Node)
	return resp, nil
}

// serverRPCAddrs lists the known servers' RPC addresses, for client failover.
func (s *api) serverRPCAddrs() []string {
	servers, err := s.RaftServers()
	if err != nil {
		return nil
	}
	var out []string
	for _, rs := range servers {
		if rs.GetRpcAddr() != "" {
			out = append(out, rs.GetRpcAddr())
		}
	}
	return out
}
