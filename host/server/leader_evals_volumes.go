package server

import (
	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/scheduler"
)

// Blocked evaluations and volume claims. An evaluation that could not
// place an alloc because its volume had no free claim waits, blocked, for
// that claim to be freed; freeing a claim creates no evaluation (a
// ClaimUpdate or AttachmentUpdate touches neither allocs nor nodes), so
// the feed wakes it, the same way it wakes evaluations blocked on
// capacity: by comparing what changed since the evaluation's snapshot.
//
// Why here and not in the state machine's apply that frees the claim: the
// state machine would have to find, in every apply that frees a claim,
// the blocked evaluations of jobs that claim the volume (a read of every
// blocked evaluation and its job's groups, replayed by every server), and
// a claim freed while no leader watched would still need the new leader's
// wake-everything pass. The feed already is the one place that decides
// when blocked work is worth another try, it wakes on state changes (a
// watch on the claims of the volumes the blocked jobs claim, not a poll),
// and a new leader wakes every blocked evaluation once.
//
// Freeing a claim removes its row, which leaves no modify index to compare
// with, so the test is the claims table's index (or the volumes table's: a
// volume registered or made schedulable) against the evaluation's snapshot,
// for jobs that claim volumes. A claim moving on (reserved to ready, say)
// therefore wakes a blocked job needlessly; its run blocks again from a
// snapshot past that index, so each change costs at most one scheduler
// run per volume-blocked job, and a job with no volumes never wakes on
// claims.

// volumesChangedAt is the latest index at which a claim or a volume
// changed, removals included.
func volumesChangedAt(snap *fsm.StateSnapshot) (uint64, error) {
	claims, err := snap.Index(fsm.TableClaims)
	if err != nil {
		return 0, err
	}
	vols, err := snap.Index(fsm.TableVolumes)
	if err != nil {
		return 0, err
	}
	return max(claims, vols), nil
}

// watchJobVolumes reports whether the job's current version claims
// volumes, and adds each volume's row and claims to ws, so a claim freed
// (or a volume registered) wakes the feed.
func watchJobVolumes(ws memdb.WatchSet, snap *fsm.StateSnapshot, jobID string) (bool, error) {
	job, err := snap.JobByID(nil, jobID)
	if err != nil || job == nil {
		return false, err
	}
	claims := false
	for _, g := range job.GetGroups() {
		for _, id := range scheduler.GroupVolumeIDs(g) {
			claims = true
			if _, err := snap.VolumeByID(ws, id); err != nil {
				return false, err
			}
			if _, err := snap.ClaimsByVolume(ws, id); err != nil {
				return false, err
			}
		}
	}
	return claims, nil
}
