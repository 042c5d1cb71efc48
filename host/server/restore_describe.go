package server

import "github.com/hashicorp/raft"

// newestSnapshot names raft's newest snapshot (the one an install just
// wrote) as log key/value pairs, for the FSM's log of a deferred restore
// that fails (fsm.DescribeRestores).
func newestSnapshot(snaps raft.SnapshotStore) []any {
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 {
		return []any{"snapshot", "unknown"}
	}
	m := metas[0]
	return []any{"snapshot_id", m.ID, "snapshot_index", m.Index, "snapshot_term", m.Term}
}
