package evals

import (
	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/rpc/pb"
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
// with, so the test is an index against the evaluation's snapshot, for
// jobs that claim volumes: the latest removal of a claim or an attachment
// (fsm's VolumeRoomIndex: a claim freed; an attachment that was detaching
// removed), or the volumes tables' index (a volume registered or made
// schedulable, a dynamic host volume made ready). A claim moving on
// (reserved to ready, in use, releasing, node-detached) or an attachment
// changing state makes no room and wakes nothing: those were the claims
// table's and attachments table's indexes once, and a volume move's
// release woke the job it was blocking at every step for a scheduler run
// and a plan that blocked again (each a raft write beside the move's own).

// volumesChangedAt is the latest index at which a claim was freed, an
// attachment removed, or a volume (CSI or dynamic host: one made ready)
// changed. Attachments count because a node whose attachment of a volume
// is detaching takes no claim on it (the scheduler blocks on that), and
// the attachment's removal, the end of the controller unpublish, need not
// free any claim.
func volumesChangedAt(snap *fsm.StateSnapshot) (uint64, error) {
	latest, err := snap.VolumeRoomIndex(nil)
	if err != nil {
		return 0, err
	}
	for _, table := range []string{fsm.TableVolumes, fsm.TableHostVolumes} {
		idx, err := snap.Index(table)
		if err != nil {
			return 0, err
		}
		latest = max(latest, idx)
	}
	return latest, nil
}

// watchJobVolumes reports whether the job's current version claims
// volumes, and adds each volume's row, claims and attachments to ws, so a
// claim freed, a volume registered or an attachment removed wakes the
// feed.
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
			if _, err := snap.AttachmentsByVolume(ws, id); err != nil {
				return false, err
			}
		}
		// Host volumes are named by name (a node's host volume): a
		// dynamic one of the name made ready, or its claim freed, may
		// make room. Static ones change only with their node.
		for _, name := range scheduler.GroupHostVolumeNames(g) {
			claims = true
			vols, _, err := snap.HostVolumesPage(ws, "", 0, func(v *pb.HostVolume) bool { return v.GetName() == name })
			if err != nil {
				return false, err
			}
			for _, v := range vols {
				if _, err := snap.ClaimsByVolume(ws, v.GetId()); err != nil {
					return false, err
				}
			}
		}
	}
	return claims, nil
}
