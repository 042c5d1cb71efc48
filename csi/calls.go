package csi

import "time"

// Call names a CSI RPC. It appears in errors and log lines, and keys the
// per-call deadlines.
type Call string

// The CSI RPCs the client makes.
const (
	CallGetPluginInfo         Call = "GetPluginInfo"
	CallGetPluginCapabilities Call = "GetPluginCapabilities"
	CallProbe                 Call = "Probe"

	CallCreateVolume               Call = "CreateVolume"
	CallDeleteVolume               Call = "DeleteVolume"
	CallControllerPublishVolume    Call = "ControllerPublishVolume"
	CallControllerUnpublishVolume  Call = "ControllerUnpublishVolume"
	CallValidateVolumeCapabilities Call = "ValidateVolumeCapabilities"
	CallListVolumes                Call = "ListVolumes"
	CallGetCapacity                Call = "GetCapacity"
	CallControllerGetCapabilities  Call = "ControllerGetCapabilities"
	CallControllerGetVolume        Call = "ControllerGetVolume"
	CallControllerExpandVolume     Call = "ControllerExpandVolume"
	CallCreateSnapshot             Call = "CreateSnapshot"
	CallDeleteSnapshot             Call = "DeleteSnapshot"
	CallListSnapshots              Call = "ListSnapshots"

	CallNodeStageVolume     Call = "NodeStageVolume"
	CallNodeUnstageVolume   Call = "NodeUnstageVolume"
	CallNodePublishVolume   Call = "NodePublishVolume"
	CallNodeUnpublishVolume Call = "NodeUnpublishVolume"
	CallNodeGetVolumeStats  Call = "NodeGetVolumeStats"
	CallNodeExpandVolume    Call = "NodeExpandVolume"
	CallNodeGetCapabilities Call = "NodeGetCapabilities"
	CallNodeGetInfo         Call = "NodeGetInfo"
)

// Timeouts maps a call to the deadline each attempt of it gets. A deadline
// already on the caller's context wins when it is sooner.
type Timeouts map[Call]time.Duration

// fallbackTimeout bounds a call missing from the table, so that no call is
// ever made without a deadline.
const fallbackTimeout = 2 * time.Minute

// DefaultTimeouts returns a fresh copy of the per-call deadlines a client
// uses unless WithTimeouts overrides them. Identity and capability calls are
// short because a healthy plugin answers them from memory; attach and mount
// calls may wait on a storage system; create, delete, expand and snapshot may
// move data.
func DefaultTimeouts() Timeouts {
	const (
		probe   = 5 * time.Second
		info    = 10 * time.Second
		lookup  = 30 * time.Second
		attach  = 2 * time.Minute
		provide = 5 * time.Minute
	)
	return Timeouts{
		CallProbe:                      probe,
		CallGetPluginInfo:              info,
		CallGetPluginCapabilities:      info,
		CallControllerGetCapabilities:  info,
		CallNodeGetCapabilities:        info,
		CallNodeGetInfo:                info,
		CallValidateVolumeCapabilities: lookup,
		CallListVolumes:                lookup,
		CallGetCapacity:                lookup,
		CallControllerGetVolume:        lookup,
		CallListSnapshots:              lookup,
		CallNodeGetVolumeStats:         lookup,
		CallControllerPublishVolume:    attach,
		CallControllerUnpublishVolume:  attach,
		CallNodeStageVolume:            attach,
		CallNodeUnstageVolume:          attach,
		CallNodePublishVolume:          attach,
		CallNodeUnpublishVolume:        attach,
		CallCreateVolume:               provide,
		CallDeleteVolume:               provide,
		CallControllerExpandVolume:     provide,
		CallNodeExpandVolume:           provide,
		CallCreateSnapshot:             provide,
		CallDeleteSnapshot:             provide,
	}
}

func (t Timeouts) of(c Call) time.Duration {
	if d, ok := t[c]; ok && d > 0 {
		return d
	}
	return fallbackTimeout
}
