package volumehooks

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/pb"
)

// Postrun takes the alloc's volumes down once its tasks are dead for good:
// NodeUnpublishVolume, NodeUnstageVolume when the alloc was the volume's
// last user on the node, then the node-detached report, queued. It waits
// for the teardowns up to TeardownWait (or its deadline); those not done
// go on in the background, retried, and survive a client restart in the
// state DB. It is idempotent: a Postrun run again (a recovered alloc that
// had finished) finds nothing left to do.
func (h *volumeHook) Postrun(ctx context.Context, req *runhooks.PostrunRequest) error {
	return h.tearDown(ctx, req.Events)
}

// Destroy does what Postrun does, for an alloc destroyed before its
// Postrun finished the job.
func (h *volumeHook) Destroy(ctx context.Context, req *runhooks.AllocDestroyRequest) error {
	return h.tearDown(ctx, req.Events)
}

func (h *volumeHook) tearDown(ctx context.Context, events eventEmitter) error {
	var dones []<-chan struct{}
	for _, cv := range h.vols {
		dones = append(dones, h.v.startTeardown(h.allocID, false, cv.volumeID, events))
	}
	t := time.NewTimer(h.v.cfg.TeardownWait)
	defer t.Stop()
	for i, done := range dones {
		select {
		case <-done:
		case <-t.C:
			h.unmountTaskBinds()
			return fmt.Errorf("volumes of alloc %s on node %s: teardown of volume %q still under way after %s, going on in the background",
				h.allocID, h.v.cfg.NodeID, h.vols[i].volumeID, h.v.cfg.TeardownWait)
		case <-ctx.Done():
			h.unmountTaskBinds()
			return fmt.Errorf("volumes of alloc %s on node %s: teardown of volume %q still under way, going on in the background: %w",
				h.allocID, h.v.cfg.NodeID, h.vols[i].volumeID, ctx.Err())
		}
	}
	return nil
}

// startTeardown starts (or joins) the teardown of user's use of volumeID
// and returns a channel closed when it ends: unpublished, unstaged if
// last, node-detached queued — or the client shutting down.
func (v *VolumeHooks) startTeardown(user string, operator bool, volumeID string, events eventEmitter) <-chan struct{} {
	return v.teardownOf(user, operator, volumeID, events).done
}

// teardownOf starts (or joins) the teardown of user's use of volumeID, as
// startTeardown, and returns it.
func (v *VolumeHooks) teardownOf(user string, operator bool, volumeID string, events eventEmitter) *teardown {
	key := userVolumeKey(user, volumeID)
	v.mu.Lock()
	defer v.mu.Unlock()
	if td, ok := v.teardowns[key]; ok {
		td.join(events)
		return td
	}
	td := newTeardown()
	td.events = events
	v.teardowns[key] = td
	// A publish of the same use still under way (an operator's claim
	// released while it waited for its plugin) is stopped first: one that
	// went on after the unpublish would leave the volume published for a
	// claim the servers free on the node-detached report. No publish of
	// the key starts while the teardown is registered (startPublish).
	p := v.publishes[key]
	if p != nil {
		p.cancel()
	}
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		defer func() {
			v.mu.Lock()
			delete(v.teardowns, key)
			v.mu.Unlock()
			close(td.done)
		}()
		if p != nil {
			select {
			case <-p.done:
			case <-v.cfg.Context.Done():
				v.logger.Info("client shutting down while a volume teardown waited for its publish to stop; the next start finishes it",
					"volume_id", volumeID, "user", user)
				return
			}
		}
		v.runTeardown(td, user, operator, volumeID)
	}()
	return td
}

// startPublish registers a publish of user's use of volumeID and returns
// its context (ctx with its own cancel) and the function that ends it; ok
// is false when a teardown of the use is under way (no publish then).
func (v *VolumeHooks) startPublish(ctx context.Context, user, volumeID string) (pctx context.Context, end func(), ok bool) {
	key := userVolumeKey(user, volumeID)
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, busy := v.teardowns[key]; busy {
		return nil, nil, false
	}
	if _, busy := v.publishes[key]; busy {
		return nil, nil, false
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &publish{user: user, volumeID: volumeID, cancel: cancel, done: make(chan struct{})}
	v.publishes[key] = p
	return pctx, func() {
		v.mu.Lock()
		delete(v.publishes, key)
		v.mu.Unlock()
		cancel()
		close(p.done)
	}, true
}

// publishesUnderWay returns the uses (user and volume) whose publish is
// under way.
func (v *VolumeHooks) publishesUnderWay() [][2]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([][2]string, 0, len(v.publishes))
	for _, p := range v.publishes {
		out = append(out, [2]string{p.user, p.volumeID})
	}
	return out
}

// requeueInUse queues the in-use report of user's use of volumeID again
// if it is published and no teardown of it is under way: a client that
// died between saving the use published and queueing its report never
// sent it. Repeating it is safe: the servers take in-use only on a ready
// claim (an in-use one is left as it is), and refuse it with
// FailedPrecondition or NotFound on one that moved on, which the Reporter
// drops. The check and the queueing are done under v.mu, so a teardown
// starting meanwhile queues its node-detached report after this one (the
// Reporter keeps the newest per claim): an in-use report never replaces
// a node-detached one.
func (v *VolumeHooks) requeueInUse(user string, operator bool, volumeID string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, busy := v.teardowns[userVolumeKey(user, volumeID)]; busy || !v.published(user, volumeID) {
		return
	}
	report := claimReport(v.cfg.NodeID, user, "", volumeID)
	if operator {
		report = claimReport(v.cfg.NodeID, "", user, volumeID)
	}
	report.State = pb.ClaimState_CLAIM_STATE_IN_USE
	// An in-use report still undelivered is kept: it may carry the node
	// expansion made at stage, which this one does not know of.
	v.cfg.Reports.QueueInUseAgain(report)
}

// runTeardown unpublishes until done. The manager retries uncertain
// errors within each try (TeardownAttempt); a try that fails — a final
// error, or uncertain ones until it ran out (a node plugin gone, a plugin
// that cannot write its state on a full disk) — is shown on the claim
// (with the time of the next try) and in task events, and tried again
// after a capped, jittered exponential backoff, for as long as the client
// runs: a teardown has no way out but success.
//
// The task events go to the alloc whose hook started or joined the
// teardown, as of each try (td.emitter).
func (v *VolumeHooks) runTeardown(td *teardown, user string, operator bool, volumeID string) {
	ctx := v.cfg.Context
	report := claimReport(v.cfg.NodeID, user, "", volumeID)
	if operator {
		report = claimReport(v.cfg.NodeID, "", user, volumeID)
	}
	retry := backoff.Backoff{Initial: v.cfg.TeardownRetry, Max: v.cfg.TeardownRetryMax}
	for tries := 1; ; tries++ {
		td.startTry()
		events := td.emitter()
		var err error
		if !operator {
			// A task's read-only bind of the publish target would keep the
			// volume reachable (and, for a plugin that stages a device,
			// busy) after the unpublish; a restarted client finishing the
			// teardown of an alloc it no longer runs removes it here.
			err = unmountTaskBinds(v.cfg.DataDir, user, volumeID)
		}
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, v.cfg.TeardownAttempt)
			err = v.cfg.Volumes.Unpublish(actx, user, volumeID, progressEvents(events, volumeID, ""))
			cancel()
		}
		if err == nil {
			break
		}
		// A Postrun that joined during the try gets its failure.
		events = td.emitter()
		td.endTry(err)
		if ctx.Err() != nil {
			v.logger.Info("client shutting down during a volume teardown; the next start finishes it",
				"volume_id", volumeID, "user", user, "error", err)
			return
		}
		// Jittered ±20% after the cap, so the tries at the cap spread too
		// (by cfg.Jitter, which tests fix, rather than Backoff.Jitter).
		d := time.Duration(float64(retry.Delay(tries)) * (0.8 + 0.4*v.cfg.Jitter()))
		v.logger.Error("volume teardown failed, will retry", "volume_id", volumeID, "user", user, "retry_in", d, "error", err)
		failure := proto2(report)
		failure.NextRetryAt = v.cfg.Now().Add(d).UnixNano()
		v.failed(events, failure, pb.ClaimState_CLAIM_STATE_RELEASING, err)
		if !td.wait(ctx, d) {
			return
		}
	}
	report.State = pb.ClaimState_CLAIM_STATE_NODE_DETACHED
	v.cfg.Reports.Queue(report)
	td.endTry(nil)
}

// wait waits d before the next try, not at all when a detach waits for
// that try (kicked, before the wait or during it); false when ctx ended.
func (td *teardown) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		td.mu.Lock()
		wanted := td.want > td.started
		td.mu.Unlock()
		if wanted {
			return true
		}
		select {
		case <-t.C:
			return true
		case <-td.kick:
		case <-ctx.Done():
			return false
		}
	}
}

func proto2(r *pb.ClientClaimUpdateRequest) *pb.ClientClaimUpdateRequest {
	return &pb.ClientClaimUpdateRequest{NodeId: r.GetNodeId(), AllocId: r.GetAllocId(), ClaimId: r.GetClaimId(), VolumeId: r.GetVolumeId()}
}

// Sweep tears down, in the background, every alloc use no live alloc
// holds (live says which allocs the client runs and are not terminal; a
// terminal one's Postrun does it) — an alloc collected while the client
// was down, a teardown the client died in the middle of — and unstages
// volumes left staged with no user. Operators' claims are left to
// OperatorClaims, which knows which the servers still have. The client
// calls it once its alloc runners are restored.
func (v *VolumeHooks) Sweep(live func(allocID string) bool) {
	seen := map[string]bool{}
	for _, u := range v.cfg.Volumes.Uses() {
		seen[u.VolumeID] = true
		if u.Operator || live(u.User) {
			continue
		}
		v.logger.Info("tearing down a volume use of an alloc this client no longer runs", "volume_id", u.VolumeID, "alloc_id", u.User)
		v.startTeardown(u.User, false, u.VolumeID, nil)
	}
	// Volumes with no use at all: a teardown that died between the last
	// unpublish and the unstage.
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		err := v.cfg.Volumes.Sweep(v.cfg.Context, func(u volumemanager.Use) bool { return true })
		if err != nil && v.cfg.Context.Err() == nil {
			v.logger.Error("unstaging volumes left without users", "error", err)
		}
	}()
}

// userVolumeKey names one use of a volume (a user, alloc or operator claim, and
// the volume) in the hook's bookkeeping: its publish or teardown under
// way and its queued report.
func userVolumeKey(user, volumeID string) string { return user + "/" + volumeID }
