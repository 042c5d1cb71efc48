package sdk

import plugin "github.com/hashicorp/go-plugin"

// Two numbers version the driver protocol:
//
//   - The go-plugin protocol version (Handshake.ProtocolVersion) changes only
//     when the wire is incompatible: a new proto package (berth.driver.v2), a
//     renamed service. go-plugin refuses to connect across it, so it is bumped
//     rarely and deliberately.
//   - The API version is negotiated by the Negotiate RPC right after the
//     handshake: the client offers every version it speaks and the plugin
//     picks the highest one it speaks too. It changes when a compatible
//     addition (a new field or RPC) alters behaviour that a peer must know
//     about before relying on it.
//
// API version history (append only; never reuse a number):
//
//	1  initial protocol: Negotiate, Capabilities, ConfigSchema, SetConfig,
//	   Fingerprint, StartTask, WaitTask, StopTask, DestroyTask, InspectTask,
//	   RecoverTask, SignalTask, TaskEvents; ExecTask and TaskStats behind
//	   capability flags.
//	2  mounts: TaskConfig.mounts carry a propagation (Mount.propagation),
//	   and DriverCapabilities.mount_volumes means the driver honours them,
//	   read_only and propagation included. A version 1 peer never sees a
//	   mount: DriverClient.StartTask refuses a task with mounts on a plugin
//	   that negotiated 1, whatever its capabilities say (berth also checks
//	   MountsSupported first, for a clearer message), because a version 1
//	   plugin would silently ignore the propagation. Start
//	   failures travel as ErrTaskStartFailed (reason TASK_START_FAILED,
//	   with start_reason, start_path and start_detail metadata); a peer
//	   that does not know the reason keeps the FailedPrecondition code.
//	3  large messages: the plugin serves with GRPCServer, so it takes
//	   requests up to driverpb.MaxMessageSize (64 MiB), as berth sends.
//	   A plugin that negotiated 1 or 2 may have been built with gRPC's
//	   default of 4 MiB: DriverClient.StartTask refuses a task whose
//	   request is larger before sending it (ErrRequestTooLarge, naming the
//	   limit), rather than have the plugin refuse it on every restart.
const (
	// APIVersion is the newest driver API version this sdk speaks.
	APIVersion uint32 = 3
	// MinAPIVersion is the oldest driver API version this sdk still speaks.
	MinAPIVersion uint32 = 1

	// APIVersionMounts is the first API version in which a driver's
	// mount_volumes capability can be trusted.
	APIVersionMounts uint32 = 2

	// APIVersionLargeMessages is the first API version whose plugins take
	// requests up to driverpb.MaxMessageSize; older ones may take no more
	// than LegacyMaxMessageSize.
	APIVersionLargeMessages uint32 = 3

	// LegacyMaxMessageSize is gRPC's default message limit, which a
	// plugin built before APIVersionLargeMessages may still have.
	LegacyMaxMessageSize = 4 << 20
)

// PluginTypeDriver is the go-plugin plugin name under which drivers are served.
const PluginTypeDriver = "driver"

// Handshake is the go-plugin handshake shared by berth and every driver
// plugin. The magic cookie is not a secret: it stops a user from running a
// plugin binary by hand and getting a confusing hang.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "BERTH_DRIVER_PLUGIN",
	MagicCookieValue: "c4a0f1e2-7b9d-4a35-9f0e-berth-driver",
}

// supportedAPIVersions lists, newest first, the API versions this sdk speaks.
func supportedAPIVersions() []uint32 {
	out := make([]uint32, 0, APIVersion-MinAPIVersion+1)
	for v := APIVersion; v >= MinAPIVersion && v > 0; v-- {
		out = append(out, v)
	}
	return out
}

// pickAPIVersion returns the highest version offered that this sdk speaks,
// or false when there is none.
func pickAPIVersion(offered []uint32) (uint32, bool) {
	var best uint32
	for _, v := range offered {
		if v >= MinAPIVersion && v <= APIVersion && v > best {
			best = v
		}
	}
	return best, best != 0
}
