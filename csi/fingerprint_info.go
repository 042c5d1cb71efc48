package csi

import (
	"maps"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/rpc/pb"
)

// Accessors for what a newcomer to CSI looks for in a fingerprint, so the
// plugin manager and the volume work do not dig through the spec's
// messages.

// NodeID is the ID the plugin knows this node by (NodeGetInfo), "" without
// a node service.
func (f *Fingerprint) NodeID() string { return f.NodeInfo.GetNodeId() }

// MaxVolumes is how many volumes the plugin can publish on this node; 0
// means no limit (the spec's "not set").
func (f *Fingerprint) MaxVolumes() int64 { return f.NodeInfo.GetMaxVolumesPerNode() }

// Topology is this node's accessible topology segments, nil when the
// plugin reports none.
func (f *Fingerprint) Topology() map[string]string {
	return maps.Clone(f.NodeInfo.GetAccessibleTopology().GetSegments())
}

// NeedsStaging reports whether NodeStageVolume must be called before
// NodePublishVolume (the node service has STAGE_UNSTAGE_VOLUME).
func (f *Fingerprint) NeedsStaging() bool {
	return f.Node.Has(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
}

// HasController reports whether the plugin serves the controller service:
// it advertises the service and ControllerGetCapabilities answered. A
// driver deployed in node mode that advertises the service in every mode
// and answers Unimplemented (Controller nil) serves no controller: what it
// would say about publishing is unknown, not "no".
func (f *Fingerprint) HasController() bool {
	return f.Plugin.HasService(csipb.PluginCapability_Service_CONTROLLER_SERVICE) && f.Controller != nil
}

// HasNode reports whether the plugin serves the node service.
func (f *Fingerprint) HasNode() bool { return f.NodeInfo != nil }

// PluginInfo turns the fingerprint into what the node reports to the
// servers for one plugin instance (health is the caller's: the fingerprint
// says only whether Probe answered ready).
func (f *Fingerprint) PluginInfo(pluginID string, typ pb.CSIPluginType, source pb.CSIPluginSource, allocID string) *pb.CSIPluginInfo {
	ctl := f.Controller
	info := &pb.CSIPluginInfo{
		PluginId:                 pluginID,
		Type:                     typ,
		Source:                   source,
		AllocId:                  allocID,
		Healthy:                  f.Ready,
		Provider:                 f.Info.Name,
		ProviderVersion:          f.Info.VendorVersion,
		RequiresControllerPlugin: f.HasController(),
		ControllerRequired:       f.ControllerRequired(),
		RequiresTopologies:       f.Plugin.HasService(csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
	}
	if f.HasController() {
		info.ControllerInfo = &pb.CSIControllerInfo{
			SupportsCreateDelete:         ctl.Has(csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME),
			SupportsAttachDetach:         ctl.Has(csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME),
			SupportsListVolumes:          ctl.Has(csipb.ControllerServiceCapability_RPC_LIST_VOLUMES),
			SupportsGetCapacity:          ctl.Has(csipb.ControllerServiceCapability_RPC_GET_CAPACITY),
			SupportsCreateDeleteSnapshot: ctl.Has(csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT),
			SupportsListSnapshots:        ctl.Has(csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS),
			SupportsClone:                ctl.Has(csipb.ControllerServiceCapability_RPC_CLONE_VOLUME),
			SupportsReadOnlyAttach:       ctl.Has(csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY),
			SupportsExpand:               ctl.Has(csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME),
			SupportsCondition:            ctl.Has(csipb.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH) || ctl.Has(csipb.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH),
			SupportsGet:                  ctl.Has(csipb.ControllerServiceCapability_RPC_GET_VOLUME),
			SupportsListPublishedNodes:   ctl.Has(csipb.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES),
		}
	}
	if f.HasNode() {
		info.NodeInfo = &pb.CSINodeInfo{
			Id:                      f.NodeID(),
			MaxVolumes:              f.MaxVolumes(),
			AccessibleTopology:      f.Topology(),
			RequiresNodeStageVolume: f.NeedsStaging(),
			SupportsStats:           f.Node.Has(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS),
			SupportsExpand:          f.Node.Has(csipb.NodeServiceCapability_RPC_EXPAND_VOLUME),
			SupportsCondition:       f.Node.Has(csipb.NodeServiceCapability_RPC_GET_VOLUME_HEALTH),
		}
	}
	return info
}
