package fsm

import (
	"berth.dev/berth/rpc/pb"
)

// StorageStats is what the storage and alloc gauges of /v1/metrics read
// from one state read: counts by state, indexed by the enum's number (a
// state this version does not know is counted under its number when in
// range, else dropped), and each plugin's instances.
type StorageStats struct {
	// Claims by pb.ClaimState; OldestClaim holds, per state, the earliest
	// ClaimStateStart of its claims (0 when it has none).
	Claims      []int
	OldestClaim []int64
	// Attachments by pb.AttachmentState, Allocs by pb.AllocClientStatus.
	Attachments []int
	Allocs      []int
	Plugins     []PluginStats
}

// PluginStats is one CSI plugin's healthy and expected instances.
type PluginStats struct {
	ID                                      string
	ControllersHealthy, ControllersExpected int
	NodesHealthy, NodesExpected             int
}

// StorageStats reads the claims, attachments, allocs and CSI plugins tables
// in one read transaction. It walks every row of the four tables without
// copying any (a few slices per call); BenchmarkStorageStats measures it.
func (r reader) StorageStats() (*StorageStats, error) {
	txn := r.readTxn()
	s := &StorageStats{
		Claims:      make([]int, len(pb.ClaimState_name)),
		OldestClaim: make([]int64, len(pb.ClaimState_name)),
		Attachments: make([]int, len(pb.AttachmentState_name)),
		Allocs:      make([]int, len(pb.AllocClientStatus_name)),
	}
	err := claimsTable.primary.each(txn, nil, nil, func(c *pb.Claim) error {
		st := int(c.GetState())
		if st < 0 || st >= len(s.Claims) {
			return nil
		}
		s.Claims[st]++
		if start := ClaimStateStart(c); start > 0 && (s.OldestClaim[st] == 0 || start < s.OldestClaim[st]) {
			s.OldestClaim[st] = start
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = attachmentsTable.primary.each(txn, nil, nil, func(a *pb.Attachment) error {
		if st := int(a.GetState()); st >= 0 && st < len(s.Attachments) {
			s.Attachments[st]++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = allocsTable.primary.each(txn, nil, nil, func(a *pb.Allocation) error {
		if st := int(a.GetClientStatus()); st >= 0 && st < len(s.Allocs) {
			s.Allocs[st]++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = csiPluginsTable.primary.each(txn, nil, nil, func(p *pb.CSIPlugin) error {
		s.Plugins = append(s.Plugins, PluginStats{
			ID:                 p.GetId(),
			ControllersHealthy: int(p.GetControllersHealthy()), ControllersExpected: int(p.GetControllersExpected()),
			NodesHealthy: int(p.GetNodesHealthy()), NodesExpected: int(p.GetNodesExpected()),
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}
