package csifake

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Defaults of New's plugin, for tests that check what a client reports.
const (
	Name          = "fake.csi.berth.dev"
	VendorVersion = "1.0.0"
	NodeID        = "fake-node"
	VolumeID      = "fake-volume"
)

// New returns a plugin whose identity and capability calls answer like a
// plugin with a controller (create/delete, publish/unpublish, get volume,
// list volumes) and a node service with stage/unstage; CreateVolume and
// ControllerGetVolume answer with volume VolumeID. Every other call answers
// with an empty response until scripted.
func New() *Plugin {
	p := &Plugin{}
	p.GetPluginInfo.Always(&csipb.GetPluginInfoResponse{Name: Name, VendorVersion: VendorVersion}, nil)
	p.GetPluginCapabilities.Always(&csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{
		ServiceCapability(csipb.PluginCapability_Service_CONTROLLER_SERVICE),
	}}, nil)
	p.Probe.Always(&csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil)
	p.ControllerGetCapabilities.Always(ControllerCapabilities(
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csipb.ControllerServiceCapability_RPC_GET_VOLUME,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES,
	), nil)
	p.NodeGetCapabilities.Always(NodeCapabilities(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME), nil)
	p.NodeGetInfo.Always(&csipb.NodeGetInfoResponse{NodeId: NodeID}, nil)
	p.CreateVolume.Always(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: VolumeID}}, nil)
	p.ControllerGetVolume.Always(&csipb.ControllerGetVolumeResponse{Volume: &csipb.Volume{VolumeId: VolumeID}}, nil)
	return p
}

// ServiceCapability builds a plugin service capability.
func ServiceCapability(t csipb.PluginCapability_Service_Type) *csipb.PluginCapability {
	return &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{
		Service: &csipb.PluginCapability_Service{Type: t},
	}}
}

// ControllerCapabilities builds a ControllerGetCapabilities response.
func ControllerCapabilities(ts ...csipb.ControllerServiceCapability_RPC_Type) *csipb.ControllerGetCapabilitiesResponse {
	resp := &csipb.ControllerGetCapabilitiesResponse{}
	for _, t := range ts {
		resp.Capabilities = append(resp.Capabilities, &csipb.ControllerServiceCapability{
			Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return resp
}

// NodeCapabilities builds a NodeGetCapabilities response.
func NodeCapabilities(ts ...csipb.NodeServiceCapability_RPC_Type) *csipb.NodeGetCapabilitiesResponse {
	resp := &csipb.NodeGetCapabilitiesResponse{}
	for _, t := range ts {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}},
		})
	}
	return resp
}

// Register adds the plugin's Identity, Controller and Node services to s.
func (p *Plugin) Register(s grpc.ServiceRegistrar) {
	csipb.RegisterIdentityServer(s, identityServer{p: p})
	csipb.RegisterControllerServer(s, controllerServer{p: p})
	csipb.RegisterNodeServer(s, nodeServer{p: p})
}

// Server is the plugin serving on a unix socket.
type Server struct {
	// Socket is the socket's path; Endpoint is the same as a CSI endpoint.
	Socket   string
	Endpoint string

	srv  *grpc.Server
	done chan struct{}
	stop sync.Once
}

// Listen serves the plugin on a new unix socket at path until Stop. A stale
// socket file left at path by a server that was not stopped is replaced.
func (p *Plugin) Listen(path string) (*Server, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("csifake: remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("csifake: %w", err)
	}
	s := &Server{Socket: path, Endpoint: "unix://" + path, srv: grpc.NewServer(), done: make(chan struct{})}
	p.Register(s.srv)
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(lis) // returns only once Stop closed the listener
	}()
	return s, nil
}

// Stop ends the server the way a plugin process ends: the socket is removed
// and every connection is cut, calls in flight included. It is safe to call
// more than once.
func (s *Server) Stop() {
	s.stop.Do(func() {
		s.srv.Stop()
		<-s.done
	})
}
