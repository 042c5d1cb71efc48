package scheduler

import "berth.dev/berth/internal/rules"

// VolumeID is rules.VolumeID, forwarded for host/server, which still calls
// it here; it is removed once host/server calls internal/rules.
var VolumeID = rules.VolumeID
