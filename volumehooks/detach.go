package volumehooks

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

var (
	// ErrDetachInUse is returned by Detach while a live alloc on the node
	// (one the client runs, not terminal) uses the volume.
	ErrDetachInUse = errcode.New(codes.FailedPrecondition, "a live alloc on the node uses the volume")
	// ErrDetachPluginGone is returned by Detach when the volume's node
	// plugin is not running (healthy) on the node: nothing could unpublish
	// or unstage it.
	ErrDetachPluginGone = errcode.New(codes.FailedPrecondition, "the volume's csi node plugin is not running on the node")
)

// errDetachUnfinished is returned by Detach when a teardown ended without
// taking its use down: the client is shutting down.
var errDetachUnfinished = errcode.New(codes.Unavailable, "the client stopped before the teardown finished")

// DetachRequest asks Detach to take a volume off the node.
type DetachRequest struct {
	VolumeID string
	// Live says whether the client runs the alloc and it is not terminal;
	// a use of such an alloc refuses the detach.
	Live func(allocID string) bool
	// NodePlugin reports whether the plugin's node instance runs here
	// (nil error) or why not; it is asked without waiting.
	NodePlugin func(pluginID string) error
}

// DetachResult is what Detach did.
type DetachResult struct {
	// PluginID is the volume's node plugin here ("" when the node held
	// nothing of the volume).
	PluginID string
	// Allocs and Claims are the users (allocs, operators' claims) whose
	// use the node unpublished.
	Allocs, Claims []string
	// Unstaged: the volume was staged here and is no longer.
	Unstaged bool
}

// usager is the optional ability of Volumes to show a volume's record
// (*volumemanager.Manager has it).
type usager interface {
	Usage(volumeID string) (*pb.VolumeUsageRecord, bool)
}

// Detach takes a volume off the node (`berth volume detach`): every use of
// it whose user is not a live alloc is torn down through the teardown an
// alloc's Postrun runs (NodeUnpublishVolume per use, NodeUnstageVolume
// when none is left, usage records kept as it keeps them, the
// node-detached report queued), a teardown already under way — one that
// keeps failing, say — is joined and tried again now rather than after its
// backoff; a volume left staged without users is unstaged. It waits for
// the teardowns until ctx ends; a try that fails returns its error (the
// teardown goes on in the background, retried, as it would have). It is
// refused with ErrDetachInUse while a live alloc uses the volume, and with
// ErrDetachPluginGone when the node plugin is not running here.
//
// Operators' claims' uses are torn down too: the servers refuse a detach
// while an operator's claim on the node is not released, and a released
// one's use is what the operators' claims follower would tear down.
func (v *VolumeHooks) Detach(ctx context.Context, req DetachRequest) (DetachResult, error) {
	volumeID := req.VolumeID
	where := fmt.Sprintf("detaching volume %q from node %s", volumeID, v.cfg.NodeID)
	var uses []volumemanager.Use
	var live []string
	for _, u := range v.cfg.Volumes.Uses() {
		if u.VolumeID != volumeID {
			continue
		}
		if !u.Operator && req.Live(u.User) {
			live = append(live, u.User)
			continue
		}
		uses = append(uses, u)
	}
	if len(live) > 0 {
		return DetachResult{}, fmt.Errorf("%s: %w: alloc %s", where, ErrDetachInUse, strings.Join(live, ", alloc "))
	}
	var res DetachResult
	staged := false
	if us, ok := v.cfg.Volumes.(usager); ok {
		if rec, ok := us.Usage(volumeID); ok {
			res.PluginID = rec.GetPluginId()
			staged = rec.GetStageState() != pb.VolumeStageState_VOLUME_STAGE_STATE_UNSPECIFIED
		}
	}
	if res.PluginID == "" && len(uses) > 0 {
		res.PluginID = uses[0].PluginID
	}
	if res.PluginID == "" {
		return res, nil // nothing of the volume here
	}
	if req.NodePlugin != nil {
		if err := req.NodePlugin(res.PluginID); err != nil {
			return res, fmt.Errorf("%s: csi plugin %q: %w: %w", where, res.PluginID, ErrDetachPluginGone, err)
		}
	}
	tds := make([]*teardown, len(uses))
	for i, u := range uses {
		v.logger.Info("detaching a volume: tearing down a use", "volume_id", volumeID, "user", u.User, "operator", u.Operator)
		tds[i] = v.teardownOf(u.User, u.Operator, volumeID, nil)
	}
	for i, td := range tds {
		if err := td.await(ctx); err != nil {
			return res, fmt.Errorf("%s: teardown of %s: %w", where, who(uses[i]), err)
		}
		if uses[i].Operator {
			res.Claims = append(res.Claims, uses[i].User)
		} else {
			res.Allocs = append(res.Allocs, uses[i].User)
		}
	}
	// A teardown that ended with the client shutting down left its use.
	for _, u := range v.cfg.Volumes.Uses() {
		if u.VolumeID == volumeID && slices.ContainsFunc(uses, func(t volumemanager.Use) bool { return t.User == u.User }) {
			return res, fmt.Errorf("%s: teardown of %s: %w", where, who(u), errDetachUnfinished)
		}
	}
	if len(uses) == 0 {
		// Staged with no user: a teardown stopped between its last
		// unpublish and the unstage.
		actx, cancel := context.WithTimeout(ctx, v.cfg.TeardownAttempt)
		err := v.cfg.Volumes.Unpublish(actx, "", volumeID, nil)
		cancel()
		if err != nil {
			return res, fmt.Errorf("%s: unstaging: %w", where, err)
		}
	}
	if us, ok := v.cfg.Volumes.(usager); ok && staged {
		_, still := us.Usage(volumeID)
		res.Unstaged = !still
	}
	slices.Sort(res.Allocs)
	slices.Sort(res.Claims)
	return res, nil
}

func who(u volumemanager.Use) string {
	if u.Operator {
		return "operator claim " + u.User
	}
	return "alloc " + u.User
}

// await kicks the teardown (a try now, not after its backoff) and waits
// for it to end or for a try to fail, or for ctx.
func (td *teardown) await(ctx context.Context) error {
	td.mu.Lock()
	tried := td.tried
	td.mu.Unlock()
	select {
	case td.kick <- struct{}{}:
	default:
	}
	for {
		select {
		case <-td.done:
			return nil
		case <-tried:
			td.mu.Lock()
			err := td.err
			tried = td.tried
			td.mu.Unlock()
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("still under way, going on in the background: %w", ctx.Err())
		}
	}
}
