package storagetest

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/storagepb"
)

// checkNegotiation: the adapter answers the storage API negotiation with
// its catalog name and a version this sdk speaks, and refuses versions it
// does not speak with FailedPrecondition (what berth reports as an
// incompatible adapter).
func checkNegotiation(t *testing.T, s *suite) {
	a := s.proc.p.Adapter()
	if a.Name() != s.h.Name {
		t.Errorf("adapter calls itself %q in the negotiation, want %q: berth refuses an adapter not named for its catalog entry", a.Name(), s.h.Name)
	}
	if v := a.APIVersion(); v < sdk.MinStorageAPIVersion || v > sdk.StorageAPIVersion {
		t.Errorf("negotiated storage API version %d, want %d..%d", v, sdk.MinStorageAPIVersion, sdk.StorageAPIVersion)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	neg := storagepb.NewStorageAdapterClient(s.conn)
	resp, err := neg.Negotiate(ctx, &storagepb.NegotiateRequest{ApiVersions: []uint32{sdk.MinStorageAPIVersion}})
	if err != nil || resp.GetApiVersion() != sdk.MinStorageAPIVersion || resp.GetName() != s.h.Name {
		t.Errorf("Negotiate offering only version %d = %v, %v; want that version and name %q", sdk.MinStorageAPIVersion, resp, err, s.h.Name)
	}
	future := []uint32{sdk.StorageAPIVersion + 1, sdk.StorageAPIVersion + 100}
	_, err = neg.Negotiate(ctx, &storagepb.NegotiateRequest{ApiVersions: future})
	wantCode(t, fmt.Sprintf("Negotiate offering only versions %v", future), err, codes.FailedPrecondition)
}

// pluginNamePattern is the CSI spec's plugin name: domain name notation,
// at most 63 characters, alphanumeric at both ends.
var pluginNamePattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,61}[A-Za-z0-9])?$`)

// checkPluginInfo: a name as the spec shapes it and a vendor version, the
// same on every call (berth records them as the plugin's provider).
func checkPluginInfo(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	info, err := s.id.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil {
		t.Fatalf("GetPluginInfo: %v", err)
	}
	if !pluginNamePattern.MatchString(info.GetName()) {
		t.Errorf("GetPluginInfo name %q: want domain name notation, 1 to 63 characters, alphanumeric at both ends", info.GetName())
	}
	if info.GetVendorVersion() == "" {
		t.Error("GetPluginInfo has no vendor_version (a required field)")
	}
	again, err := s.id.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil || again.GetName() != info.GetName() || again.GetVendorVersion() != info.GetVendorVersion() {
		t.Errorf("second GetPluginInfo = %v, %v; first %v", again, err, info)
	}
}

// checkProbeReady: Probe answers ready (true, or unset) within the
// timeout; until then berth counts the adapter unhealthy.
func checkProbeReady(t *testing.T, s *suite) {
	deadline := time.Now().Add(s.h.Timeout)
	for {
		ctx, cancel := s.ctx()
		resp, err := s.id.Probe(ctx, &csipb.ProbeRequest{})
		cancel()
		if err == nil && (resp.GetReady() == nil || resp.GetReady().GetValue()) {
			return
		}
		if err == nil {
			err = errNotReady
		}
		if time.Now().After(deadline) {
			t.Fatalf("adapter not ready within %s: last Probe: %v", s.h.Timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkCapabilities: what the adapter advertises matches what it serves.
// berth asks for the controller's capabilities only when the plugin
// advertises CONTROLLER_SERVICE and fails the fingerprint when that call
// fails; it takes a node service to exist when NodeGetCapabilities is not
// Unimplemented, and then needs NodeGetInfo's node ID to attach volumes.
func checkCapabilities(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	pc, err := s.id.GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatalf("GetPluginCapabilities: %v", err)
	}
	s.plugin = map[csipb.PluginCapability_Service_Type]bool{}
	expansion := false
	for _, c := range pc.GetCapabilities() {
		switch {
		case c.GetService() != nil:
			typ := c.GetService().GetType()
			if _, ok := csipb.PluginCapability_Service_Type_name[int32(typ)]; !ok || typ == csipb.PluginCapability_Service_UNKNOWN {
				t.Errorf("GetPluginCapabilities: service capability of unknown type %v", typ)
			}
			s.plugin[typ] = true
		case c.GetVolumeExpansion() != nil:
			expansion = true
		}
	}

	cc, err := s.ctl.ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{})
	advertised := s.plugin[csipb.PluginCapability_Service_CONTROLLER_SERVICE]
	switch {
	case advertised && err != nil:
		t.Errorf("advertises CONTROLLER_SERVICE but ControllerGetCapabilities fails: %v (berth's fingerprint of the adapter fails with it)", err)
	case !advertised && err == nil:
		t.Errorf("serves a controller (ControllerGetCapabilities = %v) without advertising CONTROLLER_SERVICE: berth never calls it", cc)
	case !advertised && status.Code(err) != codes.Unimplemented:
		t.Errorf("ControllerGetCapabilities of an adapter without CONTROLLER_SERVICE: %v, want Unimplemented", err)
	case advertised:
		s.controller = map[csipb.ControllerServiceCapability_RPC_Type]bool{}
		for _, c := range cc.GetCapabilities() {
			typ := c.GetRpc().GetType()
			if _, ok := csipb.ControllerServiceCapability_RPC_Type_name[int32(typ)]; !ok || typ == csipb.ControllerServiceCapability_RPC_UNKNOWN {
				t.Errorf("ControllerGetCapabilities: capability of unknown type %v", c)
			}
			s.controller[typ] = true
		}
	}

	nc, err := s.node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	switch {
	case status.Code(err) == codes.Unimplemented:
	case err != nil:
		t.Errorf("NodeGetCapabilities: %v, want an answer or Unimplemented (no node service)", err)
	default:
		s.nodeCaps = map[csipb.NodeServiceCapability_RPC_Type]bool{}
		for _, c := range nc.GetCapabilities() {
			typ := c.GetRpc().GetType()
			if _, ok := csipb.NodeServiceCapability_RPC_Type_name[int32(typ)]; !ok || typ == csipb.NodeServiceCapability_RPC_UNKNOWN {
				t.Errorf("NodeGetCapabilities: capability of unknown type %v", c)
			}
			s.nodeCaps[typ] = true
		}
		info, err := s.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
		switch {
		case err != nil:
			t.Errorf("NodeGetInfo of an adapter serving a node: %v", err)
		case info.GetNodeId() == "":
			t.Error("NodeGetInfo has no node_id (a required field; berth attaches volumes to it)")
		case info.GetMaxVolumesPerNode() < 0:
			t.Errorf("NodeGetInfo max_volumes_per_node %d is negative", info.GetMaxVolumesPerNode())
		}
		s.nodeID = info.GetNodeId()
	}
	t.Logf("plugin capabilities %v; controller %v; node %v (node ID %q)", keys(s.plugin), keys(s.controller), keys(s.nodeCaps), s.nodeID)
	if s.controller == nil && s.nodeCaps == nil {
		t.Error("the adapter serves neither a controller nor a node: berth has nothing to call")
	}

	for c, needs := range map[csipb.ControllerServiceCapability_RPC_Type]csipb.ControllerServiceCapability_RPC_Type{
		csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY:             csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csipb.ControllerServiceCapability_RPC_CLONE_VOLUME:                 csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES: csipb.ControllerServiceCapability_RPC_LIST_VOLUMES,
	} {
		if s.controller[c] && !s.controller[needs] {
			t.Errorf("controller advertises %s without %s", c, needs)
		}
	}
	if expansion && !s.hasController(csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME) && !s.hasNode(csipb.NodeServiceCapability_RPC_EXPAND_VOLUME) {
		t.Error("advertises VolumeExpansion without EXPAND_VOLUME on the controller or the node (the spec requires one)")
	}
}

// checkAdvertisedCalls: each advertised call berth may make that needs
// no volume answers (not Unimplemented).
func checkAdvertisedCalls(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	calls := []struct {
		cap  csipb.ControllerServiceCapability_RPC_Type
		name string
		call func() error
	}{
		{csipb.ControllerServiceCapability_RPC_LIST_VOLUMES, "ListVolumes", func() error {
			_, err := s.ctl.ListVolumes(ctx, &csipb.ListVolumesRequest{})
			return err
		}},
		{csipb.ControllerServiceCapability_RPC_GET_CAPACITY, "GetCapacity", func() error {
			_, err := s.ctl.GetCapacity(ctx, &csipb.GetCapacityRequest{})
			return err
		}},
		{csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS, "ListSnapshots", func() error {
			_, err := s.ctl.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{})
			return err
		}},
		{csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, "DeleteSnapshot of an unknown snapshot", func() error {
			_, err := s.ctl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: unknownID})
			if status.Code(err) == codes.NotFound {
				return nil // berth takes it as deleted
			}
			return err
		}},
	}
	ran := 0
	for _, c := range calls {
		if !s.hasController(c.cap) {
			continue
		}
		ran++
		if err := c.call(); err != nil {
			t.Errorf("%s (the controller advertises %s): %v", c.name, c.cap, err)
		}
	}
	if ran == 0 {
		t.Skip("the adapter advertises none of LIST_VOLUMES, GET_CAPACITY, LIST_SNAPSHOTS, CREATE_DELETE_SNAPSHOT")
	}
}

// keys lists a capability set's members, sorted, for the log.
func keys[K interface {
	~int32
	String() string
}](m map[K]bool) []string {
	if m == nil {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k.String())
	}
	slices.Sort(out)
	return out
}
