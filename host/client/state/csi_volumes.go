package state

import (
	"fmt"
	"strings"

	"berth.dev/berth/rpc/pb"
)

// PutVolumeUsage stores (or replaces) the node's record of a CSI volume,
// keyed by volume ID (csi/volumemanager writes it before each stage and
// publish call and after each unpublish and unstage).
func (db *DB) PutVolumeUsage(rec *pb.VolumeUsageRecord) error {
	if rec.GetVolumeId() == "" || rec.GetPluginId() == "" {
		return fmt.Errorf("%w: volume usage record needs a volume id and a plugin id, got volume %q, plugin %q",
			ErrInvalidRecord, rec.GetVolumeId(), rec.GetPluginId())
	}
	return db.put(bucketCSIVolumes, rec.GetVolumeId(), rec)
}

// DeleteVolumeUsage removes the record of volume volumeID; a missing one is
// not an error.
func (db *DB) DeleteVolumeUsage(volumeID string) error {
	return db.del(bucketCSIVolumes, volumeID)
}

// VolumeUsages returns every volume usage record, sorted by volume ID.
// Records that do not decode are reported as *RecordError values next to
// the others.
func (db *DB) VolumeUsages() ([]*pb.VolumeUsageRecord, error) {
	return list(db, bucketCSIVolumes, func() *pb.VolumeUsageRecord { return &pb.VolumeUsageRecord{} })
}

// volumeReportKey is "<user>/<volume>", the user being the alloc ID or the
// operator's claim ID (neither holds a '/', checked).
func volumeReportKey(req *pb.ClientClaimUpdateRequest) (string, error) {
	user := req.GetAllocId()
	if user == "" {
		user = req.GetClaimId()
	}
	if user == "" || req.GetVolumeId() == "" || strings.Contains(user, "/") {
		return "", fmt.Errorf("%w: volume report needs an alloc or claim id without '/' and a volume id, got alloc %q, claim %q, volume %q",
			ErrInvalidRecord, req.GetAllocId(), req.GetClaimId(), req.GetVolumeId())
	}
	return user + "/" + req.GetVolumeId(), nil
}

// PutVolumeReport queues (or replaces) the report on the claim the record's
// request names: one report per (alloc or claim, volume), the newest.
func (db *DB) PutVolumeReport(rec *pb.VolumeReportRecord) error {
	key, err := volumeReportKey(rec.GetRequest())
	if err != nil {
		return err
	}
	return db.put(bucketCSIVolumeReports, key, rec)
}

// DeleteVolumeReport removes the queued report on the claim req names; a
// missing one is not an error.
func (db *DB) DeleteVolumeReport(req *pb.ClientClaimUpdateRequest) error {
	key, err := volumeReportKey(req)
	if err != nil {
		return err
	}
	return db.del(bucketCSIVolumeReports, key)
}

// VolumeReports returns every queued volume report, sorted by key.
// Records that do not decode are reported as *RecordError values next to
// the others.
func (db *DB) VolumeReports() ([]*pb.VolumeReportRecord, error) {
	return list(db, bucketCSIVolumeReports, func() *pb.VolumeReportRecord { return &pb.VolumeReportRecord{} })
}
