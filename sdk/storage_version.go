package sdk

import plugin "github.com/hashicorp/go-plugin"

// The storage adapter protocol is versioned like the driver protocol (see
// version.go), with numbers of its own:
//
//   - StorageHandshake.ProtocolVersion changes only when the wire is
//     incompatible (a new berth.storage package, CSI services no longer on
//     the go-plugin connection); go-plugin refuses to connect across it.
//   - The storage API version is negotiated by StorageAdapter.Negotiate
//     right after the handshake: berth offers every version it speaks and
//     the adapter picks the highest it speaks too.
//
// The CSI services themselves are versioned by the CSI spec (csi.v1); the
// storage API version covers what berth adds around them.
//
// Storage API version history (append only; never reuse a number):
//
//	1  initial protocol: Negotiate; csi.v1 Identity (required), Controller
//	   and Node (optional) on the go-plugin gRPC connection; the adapter's
//	   config, node and data dir in its environment (StorageAdapterEnv).
const (
	// StorageAPIVersion is the newest storage API version this sdk speaks.
	StorageAPIVersion uint32 = 1
	// MinStorageAPIVersion is the oldest storage API version this sdk speaks.
	MinStorageAPIVersion uint32 = 1
)

// PluginTypeStorage is the go-plugin plugin name under which storage
// adapters are served.
const PluginTypeStorage = "storage"

// StorageHandshake is the go-plugin handshake of storage adapters. Its
// cookie differs from the drivers' so that a driver binary put where an
// adapter is expected (or the reverse) fails the handshake by name instead
// of dispensing the wrong plugin.
var StorageHandshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "BERTH_STORAGE_PLUGIN",
	MagicCookieValue: "5e1d0b7a-2c84-4f63-a9d1-berth-storage",
}

// supportedStorageAPIVersions lists, newest first, the storage API versions
// this sdk speaks.
func supportedStorageAPIVersions() []uint32 {
	out := make([]uint32, 0, StorageAPIVersion-MinStorageAPIVersion+1)
	for v := StorageAPIVersion; v >= MinStorageAPIVersion && v > 0; v-- {
		out = append(out, v)
	}
	return out
}

// pickStorageAPIVersion returns the highest version offered that this sdk
// speaks, or false when there is none.
func pickStorageAPIVersion(offered []uint32) (uint32, bool) {
	var best uint32
	for _, v := range offered {
		if v >= MinStorageAPIVersion && v <= StorageAPIVersion && v > best {
			best = v
		}
	}
	return best, best != 0
}
