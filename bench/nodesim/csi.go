package main

import (
	"context"
	"fmt"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi/pluginmanager"
)

// simPluginID is the CSI plugin every simulated node runs: a node plugin
// (no controller) with topology, served to the node's real CSI plugin
// manager (csi/pluginmanager) as a storage adapter.
const simPluginID = "nodesim"

// topologyKey is the topology segment each simulated node reports; its
// value spreads the nodes over zones ("zone-0" … "zone-<zones-1>").
const topologyKey = "topology.nodesim/zone"

// fakeCSINode is a fake CSI node plugin: Identity and Node services that
// answer at once, as a healthy plugin would. It keeps no volume state:
// staging and publishing succeed (the client's volume manager keeps the
// bookkeeping), unstage and unpublish too.
type fakeCSINode struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	nodeID string
	zone   string
	// phases, when set, records the stage and publish calls by volume.
	phases *phaseLog
}

func (p *fakeCSINode) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: simPluginID, VendorVersion: "0.1.0"}, nil
}

func (p *fakeCSINode) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{{
		Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{
			Type: csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}},
	}}}, nil
}

func (p *fakeCSINode) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{}, nil
}

func (p *fakeCSINode) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{{
		Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{
			Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}},
	}}}, nil
}

func (p *fakeCSINode) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: p.nodeID, MaxVolumesPerNode: 64,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{topologyKey: p.zone}}}, nil
}

func (p *fakeCSINode) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	p.phases.mark(phaseStaged, req.GetVolumeId(), time.Now())
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (p *fakeCSINode) NodeUnstageVolume(context.Context, *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (p *fakeCSINode) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	p.phases.mark(phasePublished, req.GetVolumeId(), time.Now())
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (p *fakeCSINode) NodeUnpublishVolume(context.Context, *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// localConn is a grpc.ClientConnInterface that calls registered services
// in process: the generated clients the CSI library builds on a conn call
// the fake plugin's handlers directly, with no socket, no HTTP/2 and no
// goroutine per node. Requests are copied in and answers copied out
// (proto.Merge), as marshalling would. Streams are not served (CSI has
// none).
type localConn struct {
	methods map[string]localMethod
}

type localMethod struct {
	impl    any
	handler grpc.MethodHandler
}

var _ grpc.ClientConnInterface = (*localConn)(nil)
var _ grpc.ServiceRegistrar = (*localConn)(nil)

func newLocalConn() *localConn { return &localConn{methods: map[string]localMethod{}} }

// RegisterService records a service's unary methods, as a grpc.Server
// would.
func (c *localConn) RegisterService(desc *grpc.ServiceDesc, impl any) {
	for _, m := range desc.Methods {
		c.methods["/"+desc.ServiceName+"/"+m.MethodName] = localMethod{impl: impl, handler: m.Handler}
	}
}

func (c *localConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	m, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "nodesim: method %s not served", method)
	}
	in, ok := args.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "nodesim: %s: request %T is not a proto message", method, args)
	}
	dec := func(v any) error {
		dst, ok := v.(proto.Message)
		if !ok {
			return fmt.Errorf("nodesim: %s: request %T is not a proto message", method, v)
		}
		proto.Merge(dst, in)
		return nil
	}
	resp, err := m.handler(m.impl, ctx, dec, nil)
	if err != nil {
		return err
	}
	out, ok := reply.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "nodesim: %s: reply %T is not a proto message", method, reply)
	}
	proto.Reset(out)
	proto.Merge(out, resp.(proto.Message))
	return nil
}

func (c *localConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "nodesim: streams are not served")
}

// fakeAdapters is a node's storage adapter source (the client's
// Config.CSIAdapters): one adapter, the fake node plugin, always running
// and healthy. Its events never fire: the plugin never restarts.
type fakeAdapters struct {
	conn *localConn
}

var _ pluginmanager.AdapterSource = (*fakeAdapters)(nil)

func newFakeAdapters(nodeID, zone string, phases *phaseLog) *fakeAdapters {
	conn := newLocalConn()
	p := &fakeCSINode{nodeID: nodeID, zone: zone, phases: phases}
	csipb.RegisterIdentityServer(conn, p)
	csipb.RegisterNodeServer(conn, p)
	return &fakeAdapters{conn: conn}
}

func (a *fakeAdapters) Names() []string { return []string{simPluginID} }

func (a *fakeAdapters) Conn(name string) (grpc.ClientConnInterface, error) {
	if name != simPluginID {
		return nil, fmt.Errorf("nodesim: no storage adapter %q", name)
	}
	return a.conn, nil
}

func (a *fakeAdapters) State(name string) (pluginmanager.AdapterState, error) {
	if name != simPluginID {
		return pluginmanager.AdapterState{}, fmt.Errorf("nodesim: no storage adapter %q", name)
	}
	return pluginmanager.AdapterState{Running: true, Healthy: true}, nil
}

func (a *fakeAdapters) Subscribe() (<-chan pluginmanager.AdapterEvent, func()) {
	// The manager stops reading when its context ends; nothing is ever
	// sent, so the channel needs no closing.
	return make(chan pluginmanager.AdapterEvent), func() {}
}
