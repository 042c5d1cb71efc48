package endpoints

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"berth.dev/berth/internal/versions"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc/pb"
)

// csiPluginsSince is the first berth version whose servers know the
// csi_plugins table and NodeCSIUpdate. Under the table rule (fsm/doc.go)
// the command is proposed only once every server in raft's configuration
// has recorded a version at least this.
var csiPluginsSince = versions.MustConstraint(">= " + CSIPluginsSinceVersion)

// CSIPluginsSinceVersion is the version csiPluginsSince names.
const CSIPluginsSinceVersion = "0.1.0-dev"

// pluginFactsSince is the first berth version whose servers derive a
// plugin row from the instances serving now (CSIPlugin.derived_from_serving,
// fsm/doc.go). Until every server records it, NodeCSIUpdate is proposed
// without derive_from_serving and every server keeps the older rule.
var pluginFactsSince = versions.MustConstraint(">= " + PluginFactsSinceVersion)

// PluginFactsSinceVersion is the version pluginFactsSince names.
const PluginFactsSinceVersion = "0.1.0-dev.1"

// csiPluginsEndpoint serves the clients' plugin reports and the plugin
// table's reads.
type csiPluginsEndpoint struct {
	pb.UnimplementedCSIPluginsServer
	s *api
}

// UpdateNode replaces a node's CSI plugin set. Each instance is filed
// under its plugin ID on the side it was sent on: its type is set from the
// side when unspecified, and a plugin_id other than its key is refused.
func (e *csiPluginsEndpoint) UpdateNode(ctx context.Context, req *pb.NodeCSIUpdateRequest) (*pb.NodeCSIUpdateResponse, error) {
	s := e.s
	if !uuid.Valid(req.GetNodeId()) {
		return nil, status.Errorf(codes.InvalidArgument, "CSI plugin update: node_id %q is not a valid id", req.GetNodeId())
	}
	cmd := &pb.NodeCSIUpdateCommand{
		NodeId:      req.GetNodeId(),
		Controllers: map[string]*pb.CSIPluginInfo{},
		Nodes:       map[string]*pb.CSIPluginInfo{},
		UpdatedAt:   s.Clock.Now().UnixNano(),
	}
	for _, side := range []struct {
		name string
		typ  pb.CSIPluginType
		in   map[string]*pb.CSIPluginInfo
		out  map[string]*pb.CSIPluginInfo
	}{
		{"controllers", pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER, req.GetControllers(), cmd.Controllers},
		{"nodes", pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, req.GetNodes(), cmd.Nodes},
	} {
		for _, id := range slices.Sorted(maps.Keys(side.in)) {
			info := side.in[id]
			switch {
			case id == "":
				return nil, status.Errorf(codes.InvalidArgument, "CSI plugins of node %s: %s: a plugin without an ID", req.GetNodeId(), side.name)
			case info == nil:
				return nil, status.Errorf(codes.InvalidArgument, "CSI plugins of node %s: %s[%q]: no instance", req.GetNodeId(), side.name, id)
			case info.GetPluginId() != "" && info.GetPluginId() != id:
				return nil, status.Errorf(codes.InvalidArgument, "CSI plugins of node %s: %s[%q] names plugin %q", req.GetNodeId(), side.name, id, info.GetPluginId())
			}
			info = proto.Clone(info).(*pb.CSIPluginInfo)
			info.PluginId = id
			if info.GetType() == pb.CSIPluginType_CSI_PLUGIN_TYPE_UNSPECIFIED {
				info.Type = side.typ
			}
			side.out[id] = info
		}
	}
	if err := s.RequireServersAt(csiPluginsSince, CSIPluginsSinceVersion, "CSI plugin updates"); err != nil {
		return nil, err
	}
	// Refused only while some server is older: the update then applies
	// under the rule every server knows.
	cmd.DeriveFromServing = s.RequireServersAt(pluginFactsSince, PluginFactsSinceVersion, "plugin facts derived from the serving instances") == nil
	waiting := s.publishesWaiting(cmd)
	idx, err := s.Apply(ctx, fsm.NodeCSIUpdate, cmd)
	if err != nil {
		return nil, fmt.Errorf("updating the CSI plugins of node %s: %w", req.GetNodeId(), err)
	}
	s.logSkippedPublishes(req.GetNodeId(), waiting)
	return &pb.NodeCSIUpdateResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}

// publishesWaiting lists, by plugin, the attaching attachments of the
// plugins an update touches whose rows require the controller publish:
// the ones the update removes if it turns a row to not requiring it.
func (s *api) publishesWaiting(cmd *pb.NodeCSIUpdateCommand) map[string][]*pb.Attachment {
	st := s.State().Snapshot()
	ids := map[string]bool{}
	for id := range cmd.GetControllers() {
		ids[id] = true
	}
	if n, err := st.NodeByID(nil, cmd.GetNodeId()); err == nil {
		for id := range n.GetCsiControllerPlugins() {
			ids[id] = true
		}
	}
	out := map[string][]*pb.Attachment{}
	for id := range ids {
		if p, err := st.CSIPluginFacts(nil, id); err != nil || !p.GetControllerRequired() {
			continue
		}
		out[id] = nil
	}
	if len(out) == 0 {
		return out
	}
	atts, err := st.AttachmentsByState(nil, pb.AttachmentState_ATTACHMENT_STATE_ATTACHING)
	if err != nil {
		return out
	}
	for _, a := range atts {
		if _, ok := out[a.GetPluginId()]; ok {
			out[a.GetPluginId()] = append(out[a.GetPluginId()], a)
		}
	}
	return out
}

// logSkippedPublishes tells the operator what an applied update did to the
// publishes waiting when it turned a plugin's row to not requiring the
// controller publish (fsm skipControllerPublish): each attachment removed
// and its claims made ready without a ControllerPublishVolume.
func (s *api) logSkippedPublishes(nodeID string, waiting map[string][]*pb.Attachment) {
	st := s.State().Snapshot()
	for _, id := range slices.Sorted(maps.Keys(waiting)) {
		p, err := st.CSIPluginFacts(nil, id)
		if err != nil || p == nil || p.GetControllerRequired() {
			continue
		}
		s.Logger.Warn("csi plugin no longer requires a controller publish: its controllers serving now do not advertise PUBLISH_UNPUBLISH_VOLUME; the publishes waiting are skipped",
			"plugin_id", id, "reported_by_node", nodeID, "provider", p.GetProvider(), "attachments_removed", len(waiting[id]))
		for _, a := range waiting[id] {
			s.Logger.Warn("controller publish skipped: attachment removed, its reserved claims made ready without ControllerPublishVolume",
				"plugin_id", id, "volume", a.GetVolumeId(), "node", a.GetNodeId())
		}
	}
}

// List pages the plugin table by ID, as the other lists do, each plugin
// without its instances and allocations.
func (e *csiPluginsEndpoint) List(ctx context.Context, req *pb.CSIPluginListRequest) (*pb.CSIPluginListResponse, error) {
	n, err := PerPage(req.GetQuery())
	if err != nil {
		return nil, err
	}
	prefix := req.GetPrefix()
	from := max(req.GetQuery().GetNextToken(), prefix)
	resp := &pb.CSIPluginListResponse{}
	var next string
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		plugins, nextID, err := st.CSIPluginsPage(ws, from, n, func(p *pb.CSIPlugin) bool { return strings.HasPrefix(p.GetId(), prefix) })
		if err != nil {
			return 0, err
		}
		resp.Plugins = resp.Plugins[:0]
		for _, p := range plugins {
			resp.Plugins = append(resp.Plugins, csiPluginStub(p))
		}
		if !strings.HasPrefix(nextID, prefix) {
			nextID = ""
		}
		next = nextID
		return st.Index(fsm.TableCSIPlugins)
	})
	if err != nil {
		return nil, err
	}
	meta.NextToken = next
	resp.Meta = meta
	return resp, nil
}

// csiPluginStub is a plugin's counts without its instances and allocations,
// which a list of many plugins over many nodes would repeat.
func csiPluginStub(p *pb.CSIPlugin) *pb.CSIPlugin {
	return &pb.CSIPlugin{
		Id: p.GetId(), Provider: p.GetProvider(), Version: p.GetVersion(), ControllerRequired: p.GetControllerRequired(),
		ControllersHealthy: p.GetControllersHealthy(), ControllersExpected: p.GetControllersExpected(),
		NodesHealthy: p.GetNodesHealthy(), NodesExpected: p.GetNodesExpected(), Schedulable: p.GetSchedulable(),
		CreateIndex: p.GetCreateIndex(), ModifyIndex: p.GetModifyIndex(),
	}
}

// Get reads one plugin whole. A plugin that is not in the table is
// NotFound; a blocking Get waits for it to appear.
func (e *csiPluginsEndpoint) Get(ctx context.Context, req *pb.CSIPluginGetRequest) (*pb.CSIPluginGetResponse, error) {
	if req.GetPluginId() == "" {
		return nil, status.Error(codes.InvalidArgument, "CSI plugin get: plugin_id is required")
	}
	resp := &pb.CSIPluginGetResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		p, err := st.CSIPluginByID(ws, req.GetPluginId())
		if err != nil {
			return 0, err
		}
		resp.Plugin = p
		if p != nil {
			return p.GetModifyIndex(), nil
		}
		return st.Index(fsm.TableCSIPlugins)
	})
	if err != nil {
		return nil, err
	}
	if resp.Plugin == nil {
		return nil, status.Errorf(codes.NotFound, "CSI plugin %q not found", req.GetPluginId())
	}
	resp.Meta = meta
	return resp, nil
}
