package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi/pluginmanager"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// csiEnabled reports whether the client has CSI plugins to manage.
func (c *Client) csiEnabled() bool { return c.cfg.CSIRegistry != nil || c.cfg.CSIAdapters != nil }

// restoreCSIRegistry takes back the plugin registrations of the previous
// run, dropping those whose alloc no runner runs any more. It runs after
// the alloc runners are built and before they run.
func (c *Client) restoreCSIRegistry() {
	if c.cfg.CSIRegistry == nil {
		return
	}
	dropped, err := c.cfg.CSIRegistry.Restore(c.allocLive)
	if err != nil {
		c.logger.Error("some csi plugin registrations could not be restored", "error", err)
	}
	if len(dropped) > 0 {
		c.logger.Info("csi plugin registrations of gone allocs dropped", "count", len(dropped))
	}
}

// allocLive reports whether the client runs the alloc and it is not
// terminal, for the registry's Restore. It must not call the registry,
// which is locked while it runs.
func (c *Client) allocLive(allocID string) bool {
	if c.allocs == nil {
		return false
	}
	c.allocs.mu.Lock()
	r := c.allocs.runners[allocID]
	c.allocs.mu.Unlock()
	if r == nil {
		return false
	}
	a := proto.Clone(r.Alloc()).(*pb.Allocation)
	if st, _ := r.ClientStatus(); st != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_UNSPECIFIED {
		a.ClientStatus = st
	}
	return !rules.AllocTerminal(a)
}

// allocHoldsVolumes reports whether the client runs the alloc and its
// tasks may still use its volumes: the runner exists and has not reached
// Postrun (its tasks are not all dead for good). An alloc the servers
// stopped is still held while its tasks are being killed (kill_timeout):
// its volumes must not be unpublished under them. The volume teardowns of
// `volume detach` and of the start's sweep ask it.
func (c *Client) allocHoldsVolumes(allocID string) bool {
	if c.allocs == nil {
		return false
	}
	c.allocs.mu.Lock()
	r := c.allocs.runners[allocID]
	c.allocs.mu.Unlock()
	if r == nil {
		return false
	}
	select {
	case <-r.TasksDone():
		return false
	default:
		return true
	}
}

// newCSIPlugins builds the plugin manager, not started yet (the volume
// hooks, built before the alloc runners, wait on it).
func (c *Client) newCSIPlugins() error {
	if !c.csiEnabled() {
		return nil
	}
	cfg := pluginmanager.Config{
		Adapters:        c.cfg.CSIAdapters,
		Send:            c.sendCSIPlugins,
		Logger:          c.logger.Named("csi-plugins"),
		RefreshInterval: c.cfg.CSIRefreshInterval,
	}
	if c.cfg.CSIRegistry != nil {
		// Only when set: a nil *Registry in the interface would not be nil.
		cfg.Registry = c.cfg.CSIRegistry
	}
	m, err := pluginmanager.New(cfg)
	if err != nil {
		return err
	}
	c.plugins = m
	return nil
}

// startCSIPlugins starts the plugin manager, after the registry is
// restored.
func (c *Client) startCSIPlugins() {
	if c.plugins != nil {
		c.plugins.Start()
	}
}

func (c *Client) stopCSIPlugins() {
	if c.plugins != nil {
		c.plugins.Stop()
	}
}

// CSIPlugins returns the node's CSI plugin set as last built by the plugin
// manager (what the servers have or are about to get); false when the
// client manages no CSI plugins.
func (c *Client) CSIPlugins() (pluginmanager.Set, bool) {
	if c.plugins == nil {
		return pluginmanager.Set{}, false
	}
	return c.plugins.Plugins(), true
}

// sendCSIPlugins is the plugin manager's Sender: CSIPlugins.UpdateNode
// over the client's server failover, once the node is registered (the
// servers refuse the plugins of a node they do not know). Refusals come
// back to the manager, which retries them: FailedPrecondition while a
// server is too old for the command, NotFound if the node was forgotten.
func (c *Client) sendCSIPlugins(_ context.Context, set pluginmanager.Set) error {
	if !c.waitRegistered() {
		return c.ctx.Err()
	}
	req := &pb.NodeCSIUpdateRequest{NodeId: c.nodeID, Controllers: set.Controllers, Nodes: set.Nodes}
	err := c.callConn(c.attemptTimeout, func(ctx context.Context, conn grpc.ClientConnInterface) error {
		_, err := pb.NewCSIPluginsClient(conn).UpdateNode(ctx, req)
		return err
	})
	if err != nil {
		return fmt.Errorf("csi plugins of node %s: %w", c.nodeID, err)
	}
	return nil
}
