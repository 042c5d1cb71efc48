package pluginsup

import (
	"time"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// pbRecord is what the state DB's reattach records of drivers
// (pb.DriverPluginRecord) and storage adapters (pb.StorageAdapterRecord)
// have in common.
type pbRecord interface {
	GetPath() string
	GetArgs() []string
	GetReattach() *pb.PluginReattach
	GetLaunchedAt() int64
	GetBerthVersion() string
}

// RecordFromPB is the Record of a persisted reattach record; digest is
// its config digest, if its kind has one.
func RecordFromPB(rec pbRecord, digest string) *Record {
	ra := rec.GetReattach()
	return &Record{
		Path: rec.GetPath(), Args: rec.GetArgs(), ConfigDigest: digest,
		Reattach:     sdk.Reattach{Pid: int(ra.GetPid()), Network: ra.GetNetwork(), Address: ra.GetAddress()},
		LaunchedAt:   time.Unix(0, rec.GetLaunchedAt()),
		BerthVersion: rec.GetBerthVersion(),
	}
}

// ReattachToPB is ra as the state DB stores it.
func ReattachToPB(ra sdk.Reattach) *pb.PluginReattach {
	return &pb.PluginReattach{Pid: int64(ra.Pid), Network: ra.Network, Address: ra.Address}
}
