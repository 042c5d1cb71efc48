package pluginmanager

import (
	"context"
	"fmt"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc/pb"
)

// nodeRef is the instance the node's set names as a plugin's node
// instance: its worker, what the set says of it, the node capabilities of
// its last good fingerprint, and where it sees the staging/publish base.
type nodeRef struct {
	w        *worker
	info     *pb.CSIPluginInfo
	caps     csi.NodeCapabilities
	stageDir string
}

// nodeRef describes in as the node instance the set reports with info.
func (in *instance) nodeRef(info *pb.CSIPluginInfo) nodeRef {
	r := nodeRef{w: in.w, info: info}
	if in.fp != nil {
		r.caps = in.fp.Node
	}
	if e, ok := in.entries[pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE]; ok {
		r.stageDir = e.Registration.GetStagePublishDir()
	}
	return r
}

// NodePlugin is a plugin's node instance on this node, as Node returns it.
type NodePlugin struct {
	// Client is the instance's connection, owned by the manager: callers
	// must not close it, and a call on it fails (Canceled or Unavailable)
	// if the instance goes away meanwhile.
	Client *csi.Client
	// Capabilities are the node service's, from the last fingerprint.
	Capabilities csi.NodeCapabilities
	// StagePublishDir is where a task-launched plugin sees the node's
	// staging and publish base for it (its registry entry's
	// stage_publish_dir); empty for a storage adapter, which runs on the
	// host and sees host paths.
	StagePublishDir string
	// Source says whether the instance is a task plugin or an adapter.
	Source pb.CSIPluginSource
}

// Node returns the plugin's node instance on this node: the one the node
// reports to the servers. It fails with ErrNoNode when the node reports
// no node instance of the plugin, and with ErrNodeUnhealthy (saying why)
// when the one it reports is not healthy or not connected yet.
func (m *Manager) Node(pluginID string) (NodePlugin, error) {
	np, _, err := m.node(pluginID)
	return np, err
}

func (m *Manager) node(pluginID string) (NodePlugin, <-chan struct{}, error) {
	m.mu.Lock()
	ref, ok := m.nodes[pluginID]
	changed := m.changed
	m.mu.Unlock()
	if !ok || ref.w == nil {
		return NodePlugin{}, changed, fmt.Errorf("csi plugin %q: %w", pluginID, ErrNoNode)
	}
	if !ref.info.GetHealthy() {
		why := ref.info.GetHealthDescription()
		if why == "" {
			why = "unhealthy"
		}
		return NodePlugin{}, changed, fmt.Errorf("csi plugin %q: %w: %s", pluginID, ErrNodeUnhealthy, why)
	}
	c := ref.w.client.Load()
	if c == nil {
		return NodePlugin{}, changed, fmt.Errorf("csi plugin %q: %w: not connected yet", pluginID, ErrNodeUnhealthy)
	}
	return NodePlugin{Client: c, Capabilities: ref.caps, StagePublishDir: ref.stageDir, Source: ref.info.GetSource()}, changed, nil
}

// WaitNode returns the plugin's node instance as Node does, waiting while
// there is none or it is not healthy: it wakes on every rebuild of the
// node's set (a registration, a health change, a fingerprint), never on a
// timer. When ctx ends first it returns the last reason wrapped with the
// context's error.
func (m *Manager) WaitNode(ctx context.Context, pluginID string) (NodePlugin, error) {
	for {
		np, changed, err := m.node(pluginID)
		if err == nil {
			return np, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return NodePlugin{}, fmt.Errorf("%w (waited: %w)", err, ctx.Err())
		}
	}
}
