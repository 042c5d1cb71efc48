package volumehooks

import (
	"context"
	"fmt"
	"sync"
	"time"

	"berth.dev/berth/csi/volumemanager"
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
// reported node-detached. Uses of operators' claims the servers no
// longer list are torn down once the first list arrives.
func (v *VolumeHooks) RunOperatorClaims(ctx context.Context, lister ClaimLister) {
	var (
		index uint64
		wait  = v.cfg.RetryStart
		mu    sync.Mutex
		// publishing are the claims a publish is under way for; failed
		// those whose publish failed. A failed claim is not tried again
		// while listed: its failure report changes it, and trying on
		// every change would loop; the operator releases it.
		publishing = map[string]bool{}
		failed     = map[string]bool{}
		wg         sync.WaitGroup
	)
	defer wg.Wait()
	for ctx.Err() == nil {
		resp, err := lister.ClientClaims(ctx, &pb.ClientClaimsRequest{NodeId: v.cfg.NodeID, Query: &pb.QueryOptions{MinIndex: index}})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			v.logger.Warn("listing the node's operator claims", "retry_in", wait, "error", err)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(wait*2, v.cfg.RetryMax)
			continue
		}
		wait = v.cfg.RetryStart
		if resp.GetMeta().GetIndex() <= index {
			// Nothing newer (the wait ran out): ask again from there.
			continue
		}
		index = resp.GetMeta().GetIndex()
		listed := map[string]bool{}
		for _, c := range resp.GetClaims() {
			listed[c.GetId()] = true
			switch st := c.GetState(); {
			case st >= pb.ClaimState_CLAIM_STATE_RELEASING:
				v.startTeardown(c.GetId(), true, c.GetVolumeId(), nil)
			case st == pb.ClaimState_CLAIM_STATE_READY || st == pb.ClaimState_CLAIM_STATE_IN_USE:
				if v.published(c.GetId(), c.GetVolumeId()) {
					continue
				}
				mu.Lock()
				busy := publishing[c.GetId()] || failed[c.GetId()]
				publishing[c.GetId()] = true
				mu.Unlock()
				if busy {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := v.publishOperatorClaim(ctx, c)
					if err != nil && ctx.Err() == nil {
						v.logger.Error("publishing an operator's claim", "claim_id", c.GetId(), "volume_id", c.GetVolumeId(), "error", err)
					}
					mu.Lock()
					delete(publishing, c.GetId())
					if err != nil && ctx.Err() == nil {
						failed[c.GetId()] = true
					}
					mu.Unlock()
				}()
			}
		}
		mu.Lock()
		for id := range failed {
			if !listed[id] {
				delete(failed, id)
			}
		}
		mu.Unlock()
		for _, u := range v.cfg.Volumes.Uses() {
			if u.Operator && !listed[u.User] {
				v.logger.Info("tearing down an operator's claim the servers no longer have", "claim_id", u.User, "volume_id", u.VolumeID)
				v.startTeardown(u.User, true, u.VolumeID, nil)
			}
		}
	}
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
	report.State = pb.ClaimState_CLAIM_STATE_IN_USE
	return v.cfg.Reports.Queue(report)
}
