package csi

import (
	"context"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// IdentityClient makes the calls of the CSI Identity service, which every
// plugin serves.
type IdentityClient struct {
	c   *caller
	rpc csipb.IdentityClient
}

// PluginInfo is what GetPluginInfo tells about the plugin's provider.
type PluginInfo struct {
	// Name is the provider name, e.g. "hostpath.csi.berth.dev".
	Name string
	// VendorVersion is the provider's own version string.
	VendorVersion string
	// Manifest is optional provider-specific detail.
	Manifest map[string]string
}

// PluginCapabilities is what GetPluginCapabilities reports.
type PluginCapabilities struct {
	Services        []csipb.PluginCapability_Service_Type
	VolumeExpansion []csipb.PluginCapability_VolumeExpansion_Type
}

// HasService reports whether the plugin advertises the service capability t.
func (p PluginCapabilities) HasService(t csipb.PluginCapability_Service_Type) bool {
	return slices.Contains(p.Services, t)
}

// HasExpansion reports whether the plugin advertises volume expansion of kind t.
func (p PluginCapabilities) HasExpansion(t csipb.PluginCapability_VolumeExpansion_Type) bool {
	return slices.Contains(p.VolumeExpansion, t)
}

// GetPluginInfo returns the plugin's provider name and version. A response
// without either breaks the spec and fails with ErrInvalidResponse.
func (c *IdentityClient) GetPluginInfo(ctx context.Context) (PluginInfo, error) {
	resp, err := invoke(ctx, c.c, CallGetPluginInfo, "", &csipb.GetPluginInfoRequest{}, c.rpc.GetPluginInfo)
	if err != nil {
		return PluginInfo{}, err
	}
	switch {
	case resp.GetName() == "":
		return PluginInfo{}, invalidResponse(CallGetPluginInfo, "", "name is empty")
	case resp.GetVendorVersion() == "":
		return PluginInfo{}, invalidResponse(CallGetPluginInfo, "", "vendor_version is empty (plugin %q)", resp.GetName())
	}
	return PluginInfo{Name: resp.GetName(), VendorVersion: resp.GetVendorVersion(), Manifest: resp.GetManifest()}, nil
}

// GetPluginCapabilities returns the plugin-wide capabilities.
func (c *IdentityClient) GetPluginCapabilities(ctx context.Context) (PluginCapabilities, error) {
	resp, err := invoke(ctx, c.c, CallGetPluginCapabilities, "", &csipb.GetPluginCapabilitiesRequest{}, c.rpc.GetPluginCapabilities)
	if err != nil {
		return PluginCapabilities{}, err
	}
	var caps PluginCapabilities
	for _, cp := range resp.GetCapabilities() {
		if s := cp.GetService(); s != nil {
			caps.Services = appendUnique(caps.Services, s.GetType())
		}
		if e := cp.GetVolumeExpansion(); e != nil {
			caps.VolumeExpansion = appendUnique(caps.VolumeExpansion, e.GetType())
		}
	}
	return caps, nil
}

// Probe asks whether the plugin is ready to serve. A plugin still initialising
// answers (false, nil); an absent readiness means ready, as the spec says.
// Probe has a deadline like every call, so a hung plugin fails the probe with
// codes.DeadlineExceeded instead of hanging the caller.
func (c *IdentityClient) Probe(ctx context.Context) (bool, error) {
	resp, err := invoke(ctx, c.c, CallProbe, "", &csipb.ProbeRequest{}, c.rpc.Probe)
	if err != nil {
		return false, err
	}
	if r := resp.GetReady(); r != nil {
		return r.GetValue(), nil
	}
	return true, nil
}

func appendUnique[T comparable](s []T, v T) []T {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}
