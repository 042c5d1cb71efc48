package volumemanager

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/csi/pluginmanager"
)

// NodeWaiter is what PluginManager needs of the node's plugin manager;
// *pluginmanager.Manager implements it.
type NodeWaiter interface {
	WaitNode(ctx context.Context, pluginID string) (pluginmanager.NodePlugin, error)
}

var _ NodeWaiter = (*pluginmanager.Manager)(nil)

// PluginManager finds node instances through the node's plugin manager:
// the instance the node reports to the servers, waited for while missing
// or unhealthy.
func PluginManager(m NodeWaiter) Plugins { return managerPlugins{m} }

type managerPlugins struct{ m NodeWaiter }

func (p managerPlugins) WaitNode(ctx context.Context, pluginID string) (Plugin, error) {
	np, err := p.m.WaitNode(ctx, pluginID)
	if err != nil {
		return Plugin{}, err
	}
	return Plugin{Node: np.Client.Node, StageUnstage: np.Capabilities.Has(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME),
		StagePublishDir: np.StagePublishDir, Expand: np.Capabilities.Has(csipb.NodeServiceCapability_RPC_EXPAND_VOLUME)}, nil
}
