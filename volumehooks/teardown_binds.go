package volumehooks

import "berth.dev/berth/sdk/executor"

// mountPoints reads the mount table (tests count the reads).
var mountPoints = executor.MountPoints

// unmountTaskBinds removes the tasks' read-only binds of the alloc's
// volumes when the teardown is still under way as Postrun (or Destroy)
// returns: the alloc dir that holds them is removed after this hook's
// Destroy. A teardown that finished did it already, as the first step of
// its try (runTeardown), so a job stop reads the mount table once for it,
// not twice, before the unpublish starts.
func (h *volumeHook) unmountTaskBinds() {
	for _, cv := range h.vols {
		if err := unmountTaskBinds(h.v.cfg.DataDir, h.allocID, cv.volumeID); err != nil {
			h.logger.Error("removing the tasks' read-only mounts of a volume", "volume_id", cv.volumeID, "error", err)
		}
	}
}
