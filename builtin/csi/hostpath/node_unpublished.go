//go:build linux

package hostpath

import (
	"errors"
	"io/fs"
	"os"
)

// NodeUnpublishVolume writes no record when it removed the target: a
// recorded target whose path is gone is unpublished, and every reader of a
// node record drops it (pruneUnpublishedTargets, in loadNodeVolume); the
// next write of the record leaves it out. The target is made (a directory,
// or a file for a block volume) before it is mounted and recorded, and
// removed only once unmounted, so a recorded target that is published
// always exists. That saves the unpublish a record write (two fsyncs) on
// the way from a job's stop to its claim freed.
//
// A plugin killed before the target's removal finds it recorded and
// unmounted, as before: NodeUnpublishVolume, called again, removes it. The
// removal is not fsynced: after a power loss it may be undone, but then so
// is the mount, and the target reads as a recorded target whose mount is
// gone, as every target does after a reboot.

// pruneUnpublishedTargets drops the recorded targets whose path is gone.
func pruneUnpublishedTargets(rec *nodeVolumeRecord) {
	for t := range rec.Targets {
		if !targetExists(t) {
			delete(rec.Targets, t)
		}
	}
}

// targetExists reports whether a publish target's path is there; an
// error other than its absence counts as there (the record is kept).
func targetExists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
