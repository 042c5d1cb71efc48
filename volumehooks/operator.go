package volumehooks

import (
	"context"
	"fmt"
	"sync"

	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/rpc/pb"
)

// ClaimLister lists the operators' claims on the node (the Claims
// service's ClientClaims, a blocking query).
type ClaimLister interface {
	ClientClaims(ctx context.Context, req *pb.ClientClaimsRequest) (*pb.ClientClaimsResponse, error)
}

// RunOperatorClaims publishes the operators' claims on this node (`berth
// volume claim`) and tears them down (`berth volume release`, or a claim
// the servers dropped: force-released while the node was away), until
// ctx ends. It follows the node's claims with a blocking query, so a new
// claim or a release is acted on when the servers apply it. A claim is
// published as an alloc's is, at <data_dir>/csi/publish/<claim>/<volume>
// (what `berth volume claim` prints), read-only for a read claim, and
// reported in-use; a releasing one is unpublished (unstaged if last) and
// reported node-detached, its publish stopped first if still under way;
// once that is done it is not done again while the claim stays listed
// (node-detached until the controller unpublish frees it). Uses of operators' claims the servers no longer list, and publishes
// under way for them, are torn down on every answer (the first list
// included). A claim the servers show ready whose use is published
// already (the client died before queueing its report) is reported
// in-use again.
func (v *VolumeHooks) RunOperatorClaims(ctx context.Context, lister ClaimLister) {
	var (
		index uint64
		// failures counts the consecutive lists that failed.
		failures int
		mu       sync.Mutex
		// failed are the claims whose publish failed. A failed claim is
		// not tried again while listed: its failure report changes it,
		// and trying on every change would loop; the operator releases
		// it. inUse are those whose in-use report is queued (by their
		// publish, or again for a use found published).
		failed = map[string]bool{}
		inUse  = map[string]bool{}
		// tornDown are the releasing (or node-detached) claims whose
		// teardown finished: a claim stays listed, node-detached, until
		// the leader's controller unpublish frees it, and every newer list
		// in between (any claim of the node changing) would otherwise
		// unpublish it again and queue its report again.
		tornDown = map[string]bool{}
		wg       sync.WaitGroup
	)
	defer wg.Wait()
	for ctx.Err() == nil {
		mu.Lock()
		noneRecorded := len(failed) == 0 && len(inUse) == 0 && len(tornDown) == 0
		mu.Unlock()
		resp, err := lister.ClientClaims(ctx, &pb.ClientClaimsRequest{NodeId: v.cfg.NodeID, Query: &pb.QueryOptions{MinIndex: index},
			HoldsNone: v.holdsNoOperatorClaim(noneRecorded)})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait := v.cfg.retry().Delay(failures)
			v.logger.Warn("listing the node's operator claims", "retry_in", wait, "error", err)
			if !backoff.Sleep(ctx.Done(), wait) {
				return
			}
			continue
		}
		failures = 0
		listed := map[string]bool{}
		for _, c := range resp.GetClaims() {
			listed[c.GetId()] = true
		}
		switch idx := resp.GetMeta().GetIndex(); {
		case idx < index:
			// A server behind the one that answered before: its list may
			// lack claims made since, which must not be torn down.
			continue
		case idx == index:
			// Nothing newer (the wait ran out): the claims were acted on
			// already; only the sweep below runs again.
		default:
			index = idx
			for _, c := range resp.GetClaims() {
				v.operatorClaim(ctx, c, &wg, &mu, opClaimState{failed: failed, inUse: inUse, tornDown: tornDown})
			}
		}
		mu.Lock()
		for id := range failed {
			if !listed[id] {
				delete(failed, id)
			}
		}
		for _, m := range []map[string]bool{inUse, tornDown} {
			for id := range m {
				if !listed[id] {
					delete(m, id)
				}
			}
		}
		mu.Unlock()
		v.sweepOperatorClaims(listed)
	}
}

// opClaimState is what RunOperatorClaims remembers of the claims it
// listed, by claim ID (see there).
type opClaimState struct {
	failed, inUse, tornDown map[string]bool
}

// operatorClaim acts on one listed operator's claim: tears it down when
// releasing (or further) unless that was done, publishes it when ready or
// in use and not published yet, reports in-use again a ready one
// published already. Publishes and the waits for teardowns run in
// goroutines counted by wg; mu guards the maps of m.
func (v *VolumeHooks) operatorClaim(ctx context.Context, c *pb.Claim, wg *sync.WaitGroup, mu *sync.Mutex, m opClaimState) {
	failed, inUse := m.failed, m.inUse
	id, volumeID := c.GetId(), c.GetVolumeId()
	switch st := c.GetState(); {
	case st >= pb.ClaimState_CLAIM_STATE_RELEASING:
		mu.Lock()
		done := m.tornDown[id]
		mu.Unlock()
		if done {
			return
		}
		if st >= pb.ClaimState_CLAIM_STATE_NODE_DETACHED && v.holdsNothing(id, volumeID) {
			// Detached already (by this client before it restarted, or
			// forced by the servers while it held nothing): no call and no
			// report is left to make.
			mu.Lock()
			m.tornDown[id] = true
			mu.Unlock()
			return
		}
		td := v.startTeardown(id, true, volumeID, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-td:
			case <-ctx.Done():
				return
			}
			// Ended: finished, unless the client is shutting down with
			// the use still held (the next start finishes it).
			if v.holdsNothing(id, volumeID) {
				mu.Lock()
				m.tornDown[id] = true
				mu.Unlock()
			}
		}()
	case st == pb.ClaimState_CLAIM_STATE_READY || st == pb.ClaimState_CLAIM_STATE_IN_USE:
		if v.published(id, volumeID) {
			mu.Lock()
			again := st == pb.ClaimState_CLAIM_STATE_READY && !inUse[id]
			inUse[id] = inUse[id] || again
			mu.Unlock()
			if again {
				v.requeueInUse(id, true, volumeID)
			}
			return
		}
		mu.Lock()
		isFailed := failed[id]
		mu.Unlock()
		if isFailed {
			return
		}
		pctx, end, ok := v.startPublish(ctx, id, volumeID)
		if !ok {
			return // under way already, or being torn down
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer end()
			err := v.publishOperatorClaim(pctx, c)
			// pctx ends with ctx or with a teardown of the claim, which
			// takes over: neither is a failure of the claim.
			if err != nil && pctx.Err() == nil {
				v.logger.Error("publishing an operator's claim", "claim_id", id, "volume_id", volumeID, "error", err)
			}
			mu.Lock()
			switch {
			case err == nil:
				inUse[id] = true
			case pctx.Err() == nil:
				failed[id] = true
			}
			mu.Unlock()
		}()
	}
}

// sweepOperatorClaims tears down the uses of operators' claims the
// servers no longer list (listed), and the publishes under way for them:
// a claim freed (or force-released) before its publish ended.
func (v *VolumeHooks) sweepOperatorClaims(listed map[string]bool) {
	for _, u := range v.cfg.Volumes.Uses() {
		if u.Operator && !listed[u.User] {
			v.logger.Info("tearing down an operator's claim the servers no longer have", "claim_id", u.User, "volume_id", u.VolumeID)
			v.startTeardown(u.User, true, u.VolumeID, nil)
		}
	}
	for _, p := range v.publishesUnderWay() {
		if !listed[p[0]] {
			v.logger.Info("stopping the publish of an operator's claim the servers no longer have", "claim_id", p[0], "volume_id", p[1])
			v.startTeardown(p[0], true, p[1], nil)
		}
	}
}

// holdsNothing reports whether the node holds no use of user's on
// volumeID and no publish or teardown of it is under way.
func (v *VolumeHooks) holdsNothing(user, volumeID string) bool {
	for _, u := range v.cfg.Volumes.Uses() {
		if u.User == user && u.VolumeID == volumeID {
			return false
		}
	}
	key := userVolumeKey(user, volumeID)
	v.mu.Lock()
	defer v.mu.Unlock()
	_, tearing := v.teardowns[key]
	_, publishing := v.publishes[key]
	return !tearing && !publishing
}

// published reports whether the node holds user's use of volumeID
// published.
func (v *VolumeHooks) published(user, volumeID string) bool {
	for _, u := range v.cfg.Volumes.Uses() {
		if u.User == user && u.VolumeID == volumeID {
			return u.State == pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED
		}
	}
	return false
}

// publishOperatorClaim publishes one operator's claim, as the volume
// hook's prerun does an alloc's volume; a failure is shown on the claim
// and left for the operator to release.
func (v *VolumeHooks) publishOperatorClaim(ctx context.Context, c *pb.Claim) error {
	where := fmt.Sprintf("volume %q of operator claim %q on node %s", c.GetVolumeId(), c.GetId(), v.cfg.NodeID)
	resp, err := v.waitReady(ctx, nil, &pb.ClientClaimRequest{NodeId: v.cfg.NodeID, ClaimId: c.GetId()}, 0, where)
	if err != nil {
		return err
	}
	claim, vol := resp.GetClaim(), resp.GetVolume()
	report := claimReport(v.cfg.NodeID, "", claim.GetId(), claim.GetVolumeId())
	pctx, cancel := context.WithTimeout(ctx, v.cfg.PluginWait)
	_, err = v.cfg.Plugins.WaitNode(pctx, vol.GetPluginId())
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err = fmt.Errorf("%s: node plugin %q not running and healthy after %s: %w (%w)", where, vol.GetPluginId(), v.cfg.PluginWait,
			ErrNodePluginUnavailable, err)
		v.failed(nil, report, claim.GetState(), err)
		return err
	}
	if _, err := v.cfg.Volumes.Publish(ctx, volumemanager.PublishRequest{Volume: vol, User: claim.GetId(), Operator: true,
		AccessMode: claim.GetAccessMode(), AttachmentMode: claim.GetAttachmentMode(),
		ReadOnly: claim.GetMode() == pb.ClaimMode_CLAIM_MODE_READ, PublishContext: resp.GetPublishContext()}); err != nil {
		if ctx.Err() == nil {
			v.failed(nil, report, claim.GetState(), err)
		}
		return err
	}
	expanded, err := v.expandPending(ctx, vol, claim, nil, fmt.Sprintf("Volume %q", vol.GetId()))
	if err != nil {
		err = fmt.Errorf("%s: %w", where, err)
		if ctx.Err() == nil {
			v.failed(nil, report, claim.GetState(), err)
		}
		return err
	}
	report.State, report.NodeExpandedBytes = pb.ClaimState_CLAIM_STATE_IN_USE, expanded
	v.cfg.Reports.QueueInUse(report)
	return nil
}
