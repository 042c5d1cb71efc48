package csi

import (
	"context"
	"errors"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// Fingerprint is what berth knows about a plugin after asking it: who made
// it, whether it is ready, and what it can do.
type Fingerprint struct {
	Info  PluginInfo
	Ready bool
	// Plugin holds the plugin-wide capabilities.
	Plugin PluginCapabilities
	// Controller is nil when the plugin does not advertise the controller
	// service.
	Controller ControllerCapabilities
	// Node is nil when the plugin serves no node service (a controller-only
	// deployment answers NodeGetCapabilities with Unimplemented).
	Node NodeCapabilities
	// NodeInfo is NodeGetInfo's answer, nil without a node service.
	NodeInfo *csipb.NodeGetInfoResponse
}

// ControllerRequired reports whether volumes of this plugin must be attached
// with ControllerPublishVolume before a node can stage them: the plugin
// advertises the controller service and that service supports
// publish/unpublish. Either alone is not enough — a controller that only
// creates volumes needs no attach step.
func (f *Fingerprint) ControllerRequired() bool {
	return f.Plugin.HasService(csipb.PluginCapability_Service_CONTROLLER_SERVICE) &&
		f.Controller.Has(csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
}

// Fingerprint asks the plugin for its info, readiness and capabilities. Each
// call has its own deadline; the first failure is returned.
func (c *Client) Fingerprint(ctx context.Context) (*Fingerprint, error) {
	var (
		f   Fingerprint
		err error
	)
	if f.Info, err = c.Identity.GetPluginInfo(ctx); err != nil {
		return nil, err
	}
	if f.Ready, err = c.Identity.Probe(ctx); err != nil {
		return nil, err
	}
	if f.Plugin, err = c.Identity.GetPluginCapabilities(ctx); err != nil {
		return nil, err
	}
	if f.Plugin.HasService(csipb.PluginCapability_Service_CONTROLLER_SERVICE) {
		if f.Controller, err = c.Controller.ControllerGetCapabilities(ctx); err != nil {
			return nil, err
		}
	}
	f.Node, err = c.Node.NodeGetCapabilities(ctx)
	var e *Error
	switch {
	case errors.As(err, &e) && e.Code == codes.Unimplemented:
		return &f, nil
	case err != nil:
		return nil, err
	}
	if f.NodeInfo, err = c.Node.NodeGetInfo(ctx); err != nil {
		return nil, err
	}
	return &f, nil
}
