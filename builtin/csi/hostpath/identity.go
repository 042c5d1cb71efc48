//go:build linux

package hostpath

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"berth.dev/berth/internal/version"
)

// identity serves the CSI identity service.
type identity struct {
	csi.UnimplementedIdentityServer
	cfg runtimeConfig
	lay layout
}

var _ csi.IdentityServer = (*identity)(nil)

// GetPluginInfo reports the plugin's name and berth's version.
func (i *identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{
		Name:          PluginName,
		VendorVersion: version.Version,
		Manifest:      map[string]string{"mode": i.cfg.Mode},
	}, nil
}

// GetPluginCapabilities reports the services this process serves (the
// controller ones only outside node mode), topology support and online
// expansion.
func (i *identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	service := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	caps := []*csi.PluginCapability{
		service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{
			Type: csi.PluginCapability_VolumeExpansion_ONLINE}}},
	}
	if i.cfg.controller {
		caps = append(caps,
			service(csi.PluginCapability_Service_CONTROLLER_SERVICE),
			service(csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE))
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe reports ready while the state directory is reachable, and
// FailedPrecondition (unhealthy) otherwise.
func (i *identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if _, err := statFS(i.lay.root); err != nil {
		return nil, errPrecondition("state directory unreachable: %v", err)
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
