package volumeloops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"berth.dev/berth/internal/rules"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// The attach reconciler. Each attaching attachment gets a
// ControllerPublishVolume, each detaching one a ControllerUnpublishVolume,
// through a controller instance of the volume's plugin (PickController),
// and the outcome is one AttachmentUpdate:
//
//   - success: attached with the publish context (the node's reserved
//     claims become ready in that apply), or detached (the attachment is
//     removed and its node-detached claims freed). NotFound from an
//     unpublish is success: nothing is published to undo.
//   - an uncertain failure (Canceled, DeadlineExceeded, Unavailable,
//     ResourceExhausted, Aborted: the call may have happened) keeps the
//     state with the error, attempts+1 and next_retry_at (capped
//     exponential backoff with jitter); the call is made again then, or
//     at once when what a final failure waits for (below) changes first.
//   - a final failure keeps the state with the error and no retry: the
//     operator sees it on the volume, and the call is made again once the
//     volume, its plugin's row, the node or the node of one of the
//     plugin's controllers changes (a new controller, a node plugin that
//     reports its CSI node ID, a fixed volume, a controller's node back
//     from down or unfenced), or once the reconcile pass unpublished an
//     orphan publish of the volume that may have been why a publish was
//     refused (it records that on the attachment: reconcile.go). A
//     detaching attachment's final failure is also retried on the
//     uncertain backoff (next_retry_at is recorded): a teardown has no
//     way out but success, and the plugin that answered Internal once
//     (say, with its disk full) may answer ok the next time, with nothing
//     in the state changed to wake it.
//
// Calls to one plugin are serialized: one worker per plugin takes the due
// attachments in order, detaching ones first (an unpublish frees what a
// publish elsewhere may wait for), and holds the plugin's lock from each
// call until its outcome is written, so the reconcile pass never sees a
// call whose result is not in the state yet. Before each call the worker
// reads the attachment again: one that moved on meanwhile (attached by an
// earlier write, detaching since) is acted on as it is now, so a detach
// gets one unpublish however many passes saw it.

// runAttacher is the attach reconciler's loop: it wakes on changes to the
// attachments (and to what a failed one waits for), on a worker's end and
// on the earliest next_retry_at.
func (v *Loops) runAttacher(ctx context.Context) {
	// run made this leadership's wake channel before starting this loop;
	// a watcher goroutine below may outlive the loop, and must not read
	// the field the next leadership's run writes.
	v.mu.Lock()
	wake := v.wake
	v.mu.Unlock()
	var retry clock.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		ws := memdb.NewWatchSet()
		store := v.state()
		ws.Add(store.AbandonCh())
		next := v.attachPass(ctx, ws, store.Snapshot())
		if retry != nil {
			retry.Stop()
			retry = nil
		}
		if !next.IsZero() {
			retry = v.timerAt(next, v.kick)
		}
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-wake:
				cancel()
			case <-wctx.Done():
			}
		}()
		_ = ws.WatchCtx(wctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
}

// attachPass hands the due attachments to the plugins' workers and
// returns the earliest retry still ahead (zero if none).
func (v *Loops) attachPass(ctx context.Context, ws memdb.WatchSet, snap *fsm.StateSnapshot) (next time.Time) {
	now := v.clock.Now()
	due := map[string][]attachmentKey{}
	var plugins []string
	for _, state := range []pb.AttachmentState{pb.AttachmentState_ATTACHMENT_STATE_DETACHING, pb.AttachmentState_ATTACHMENT_STATE_ATTACHING} {
		atts, err := snap.AttachmentsByState(ws, state)
		if err != nil {
			v.logger.Error("attach reconciler: reading attachments", "state", pb.EnumWord(state), "error", err)
			return now.Add(v.cfg.writeRetry)
		}
		for _, a := range atts {
			ok, at := v.attachmentDue(ws, snap, a, now)
			if held := v.heldUntil(a); held.After(now) {
				ok, at = false, held
			}
			if !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
			}
			if !ok {
				continue
			}
			p := a.GetPluginId()
			if _, seen := due[p]; !seen {
				plugins = append(plugins, p)
			}
			due[p] = append(due[p], attachmentKey{a.GetVolumeId(), a.GetNodeId()})
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, p := range plugins {
		if v.busy[p] {
			// The worker wakes the loop when it ends; what it did not take
			// is found then.
			continue
		}
		v.busy[p] = true
		v.workers.Add(1)
		go v.work(ctx, p, due[p])
	}
	return next
}

// attachmentDue reports whether a call is due for a now, or else when one
// comes due (zero: when something changes). A final failure waits for a
// change, after the state its step was decided on, of what the call's
// outcome depends on:
// the volume, its plugin's row, the node, and the nodes of the plugin's
// controllers (PickController reads their status and fence, which their
// plugin row does not carry: an unfenced controller node changes only its
// node row). Those rows are added to ws so the change wakes the loop; the
// condition is read from the rows alone, so a new leader decides the
// same. A detaching attachment is also retried on the uncertain backoff,
// whichever comes first: at its recorded next_retry_at, or its failure
// time plus the backoff.
func (v *Loops) attachmentDue(ws memdb.WatchSet, snap *fsm.StateSnapshot, a *pb.Attachment, now time.Time) (bool, time.Time) {
	e := a.GetLastError()
	if e == nil {
		return true, time.Time{}
	}
	if v.changedSinceDecided(ws, snap, a) {
		// New facts (a controller became healthy, moved or came back, the
		// node reported its CSI node ID, the volume was fixed): the call
		// is made again now, whatever the failure's class. An uncertain
		// failure's backoff is for a plugin that failed with nothing else
		// changed; after a run of failures it is minutes long, and a
		// controller that turned up meanwhile must not wait it out (the
		// chaos suite's seed 5024: an unpublish refused by a controller
		// instance still registering waited 76 s, its claim with it).
		return true, time.Time{}
	}
	if e.GetClass() == pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL {
		if a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_DETACHING {
			return false, time.Time{}
		}
		at := time.Unix(0, a.GetNextRetryAt())
		if a.GetNextRetryAt() == 0 {
			// Failed by a server that recorded no retry time for a final
			// detach failure. The nominal backoff (no jitter) keeps this
			// the same on every pass and every leader.
			at = time.Unix(0, e.GetFailedAt()).Add(v.nominalBackoff(a.GetAttempts()))
		}
		if at.After(now) {
			return false, at
		}
		return true, time.Time{}
	}
	if at := time.Unix(0, a.GetNextRetryAt()); a.GetNextRetryAt() != 0 && at.After(now) {
		return false, at
	}
	return true, time.Time{}
}

// changedSinceDecided reports whether the volume, its plugin's row, the
// attachment's node or the node of one of the plugin's controllers changed
// after the state the failed step was decided on (not after the failure
// was written: a change made while the step ran predates the failure's
// index and would be lost). It adds them all to ws, so such a change
// wakes the attacher.
func (v *Loops) changedSinceDecided(ws memdb.WatchSet, snap *fsm.StateSnapshot, a *pb.Attachment) bool {
	vol, _ := snap.VolumeByID(ws, a.GetVolumeId())
	plugin, _ := snap.CSIPluginFacts(ws, a.GetPluginId())
	controllers, _ := snap.CSIPluginControllers(ws, a.GetPluginId())
	node, _ := snap.NodeByID(ws, a.GetNodeId())
	seen := max(vol.GetModifyIndex(), plugin.GetModifyIndex(), node.GetModifyIndex())
	for id := range controllers {
		if c, _ := snap.NodeByID(ws, id); c != nil {
			seen = max(seen, c.GetModifyIndex())
		}
	}
	base := a.GetModifyIndex()
	if d := a.GetLastError().GetDecidedIndex(); d > 0 {
		base = d
	}
	return seen > base
}

// work makes the calls of one plugin's due attachments, one at a time.
func (v *Loops) work(ctx context.Context, pluginID string, keys []attachmentKey) {
	defer v.workers.Done()
	defer func() {
		v.mu.Lock()
		delete(v.busy, pluginID)
		v.mu.Unlock()
		v.kick()
	}()
	lock := v.pluginLock(pluginID)
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		lock.Lock()
		v.reconcileAttachment(ctx, k)
		lock.Unlock()
	}
}

// reconcileAttachment reads the attachment as it is now and, when a call
// is still due, makes it and writes the outcome.
func (v *Loops) reconcileAttachment(ctx context.Context, k attachmentKey) {
	snap := v.state().Snapshot()
	a, err := snap.Attachment(nil, k.volume, k.node)
	if err != nil {
		v.logger.Error("attach reconciler: reading attachment", "volume", k.volume, "node", k.node, "error", err)
		return
	}
	if a == nil {
		// Gone (detached, or removed with its volume): nothing of it is
		// kept for a later try.
		v.mu.Lock()
		delete(v.avoid, k)
		delete(v.hold, k)
		v.mu.Unlock()
		return
	}
	now := v.clock.Now()
	if due, _ := v.attachmentDue(nil, snap, a, now); !due || v.heldUntil(a).After(now) {
		return
	}
	switch a.GetState() {
	case pb.AttachmentState_ATTACHMENT_STATE_ATTACHING:
		v.publish(ctx, snap, a)
	case pb.AttachmentState_ATTACHMENT_STATE_DETACHING:
		v.unpublish(ctx, snap, a)
	}
}

// publish sends ControllerPublishVolume for an attaching attachment and
// records the outcome.
func (v *Loops) publish(ctx context.Context, snap *fsm.StateSnapshot, a *pb.Attachment) {
	req, err := publishRequest(snap, a)
	if err != nil {
		v.recordFailure(ctx, snap, a, "", "", err)
		return
	}
	controller, err := v.pick(snap, a)
	if err != nil {
		v.recordFailure(ctx, snap, a, "", "", err)
		return
	}
	resp := &csipb.ControllerPublishVolumeResponse{}
	start := time.Now()
	err = v.call(ctx, controller, a.GetPluginId(), instanceOn(snap, a.GetPluginId(), controller), csipb.Controller_ControllerPublishVolume_FullMethodName, req, resp)
	if ctx.Err() != nil {
		return // the leadership ended: the next leader makes the call again
	}
	observeControllerOp("attach", start, err)
	if err != nil {
		v.recordFailure(ctx, snap, a, controller, req.GetNodeId(), fmt.Errorf("ControllerPublishVolume of volume %s (external %s) to node %s through the controller on node %s: %w",
			a.GetVolumeId(), req.GetVolumeId(), a.GetNodeId(), controller, err))
		return
	}
	v.logger.Info("volume published", "volume", a.GetVolumeId(), "node", a.GetNodeId(), "controller", controller, "attempts", a.GetAttempts()+1)
	v.writeAttachment(ctx, a, &pb.AttachmentUpdateCommand{
		VolumeId: a.GetVolumeId(), NodeId: a.GetNodeId(), State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED,
		ControllerNodeId: controller, PublishContext: resp.GetPublishContext(), CsiNodeId: req.GetNodeId(), UpdatedAt: v.clock.Now().UnixNano(),
	})
}

// unpublish sends ControllerUnpublishVolume for a detaching attachment and
// records the outcome. It names the CSI node ID the publish named, kept
// on the attachment, so a node the servers no longer know (collected or
// deregistered) is still unpublished from. An attachment that never
// recorded one, whose CSI node ID cannot be had from its node either, is
// removed without a call when its node is gone, down or fenced: no
// ControllerUnpublishVolume can be made without the ID, and a node that
// is off reports none until it comes back, which may be never (a down
// node's row stays until it is collected, and the attachment would keep
// its volume from being deregistered all that time). Such an attachment
// was almost always never published: the publish call names the CSI node
// ID, and its outcome, success or failure, records it; only a leader that
// died between the call and the write leaves a publish unrecorded. The
// reconcile pass, which reads the controller's published nodes, is the
// second chance there. A ready node without the plugin's node instance
// is waited for (a final error, made again when the node reports one or
// on the backoff): a
// plugin restarting on a live node reports its ID within moments, and
// the error on the attachment names what is missing.
func (v *Loops) unpublish(ctx context.Context, snap *fsm.StateSnapshot, a *pb.Attachment) {
	vol, err := snap.VolumeByID(nil, a.GetVolumeId())
	if err != nil {
		v.logger.Error("attach reconciler: reading volume", "volume", a.GetVolumeId(), "error", err)
		return
	}
	csiNode, err := attachmentCSINode(snap, a)
	if errors.Is(err, errNoCSINode) && nodeOff(snap, a.GetNodeId()) {
		err = fmt.Errorf("%w (node %s is down or fenced, and no CSI node ID was recorded for the attachment)", errNodeGone, a.GetNodeId())
	}
	if errors.Is(err, errNodeGone) || vol == nil {
		v.logger.Warn("detaching without a controller call: the node or the volume is gone; the reconcile pass unpublishes what the controller still lists",
			"volume", a.GetVolumeId(), "node", a.GetNodeId(), "reason", err)
		v.writeAttachment(ctx, a, &pb.AttachmentUpdateCommand{
			VolumeId: a.GetVolumeId(), NodeId: a.GetNodeId(), State: pb.AttachmentState_ATTACHMENT_STATE_DETACHED, UpdatedAt: v.clock.Now().UnixNano(),
		})
		return
	}
	if errors.Is(err, errNoCSINode) {
		// The operator's way out when the plugin will not come back to
		// this node: a fenced node is detached without a call.
		err = fmt.Errorf("%w; the detach waits for the node to report the plugin's node instance, or for the node to be down or fenced", err)
	}
	if err != nil {
		v.recordFailure(ctx, snap, a, "", "", err)
		return
	}
	controller, err := v.pick(snap, a)
	if errors.Is(err, ErrNoCapableController) && !pluginRequiresPublish(snap, a.GetPluginId()) {
		v.logger.Warn("detaching without a controller call: the plugin no longer requires a controller publish and none of its controllers serving now unpublishes",
			"volume", a.GetVolumeId(), "node", a.GetNodeId(), "plugin", a.GetPluginId(), "reason", err)
		v.writeAttachment(ctx, a, &pb.AttachmentUpdateCommand{
			VolumeId: a.GetVolumeId(), NodeId: a.GetNodeId(), State: pb.AttachmentState_ATTACHMENT_STATE_DETACHED, UpdatedAt: v.clock.Now().UnixNano(),
		})
		return
	}
	if err != nil {
		v.recordFailure(ctx, snap, a, "", "", err)
		return
	}
	req := &csipb.ControllerUnpublishVolumeRequest{VolumeId: vol.GetExternalId(), NodeId: csiNode, Secrets: vol.GetSecrets()}
	start := time.Now()
	err = v.call(ctx, controller, a.GetPluginId(), instanceOn(snap, a.GetPluginId(), controller), csipb.Controller_ControllerUnpublishVolume_FullMethodName, req, &csipb.ControllerUnpublishVolumeResponse{})
	if ctx.Err() != nil {
		return
	}
	if err != nil && errcode.Code(err) != codes.NotFound {
		observeControllerOp("detach", start, err)
		v.recordFailure(ctx, snap, a, controller, "", fmt.Errorf("ControllerUnpublishVolume of volume %s (external %s) from node %s through the controller on node %s: %w",
			a.GetVolumeId(), vol.GetExternalId(), a.GetNodeId(), controller, err))
		return
	}
	observeControllerOp("detach", start, nil)
	v.logger.Info("volume unpublished", "volume", a.GetVolumeId(), "node", a.GetNodeId(), "controller", controller, "not_found", err != nil)
	v.writeAttachment(ctx, a, &pb.AttachmentUpdateCommand{
		VolumeId: a.GetVolumeId(), NodeId: a.GetNodeId(), State: pb.AttachmentState_ATTACHMENT_STATE_DETACHED,
		ControllerNodeId: controller, UpdatedAt: v.clock.Now().UnixNano(),
	})
}

// pick chooses the controller for a's next call.
func (v *Loops) pick(snap *fsm.StateSnapshot, a *pb.Attachment) (string, error) {
	load, err := controllerLoad(snap)
	if err != nil {
		return "", err
	}
	v.mu.Lock()
	avoid := v.avoid[attachmentKey{a.GetVolumeId(), a.GetNodeId()}]
	v.mu.Unlock()
	id, err := pickControllerFrom(snap, a.GetPluginId(), CapPublish, a.GetControllerNodeId(), avoid, load)
	if err != nil {
		return "", fmt.Errorf("volume %s on node %s: %w", a.GetVolumeId(), a.GetNodeId(), err)
	}
	return id, nil
}

// call makes one controller call with the call timeout, for the
// controller instance expect names when it is set (see ControllerCaller).
func (v *Loops) call(ctx context.Context, controller, pluginID string, expect *pb.CSIControllerInstance, method string, req, resp proto.Message) error {
	cctx, cancel := context.WithTimeout(ctx, v.cfg.callTimeout)
	defer cancel()
	return v.caller.ControllerCall(cctx, controller, pluginID, expect, method, req, resp)
}

// instanceOn is the controller instance of pluginID on nodeID in snap
// (nil when snap has none: the call then goes to whatever serves).
func instanceOn(snap *fsm.StateSnapshot, pluginID, nodeID string) *pb.CSIControllerInstance {
	inst, err := snap.CSIPluginInstance(nil, pluginID, nodeID, true)
	if err != nil || inst == nil {
		return nil
	}
	return csi.InstanceOf(inst)
}

// recordFailure writes a failed step of a, decided on snap: the error
// with its class, snap's index, attempts+1 and, for an uncertain error,
// the time of the next try.
// controller is the node whose instance answered ("" when no call was
// made); csiNode the CSI node ID a failed publish named (it may have
// happened, so the unpublish names it too).
func (v *Loops) recordFailure(ctx context.Context, snap *fsm.StateSnapshot, a *pb.Attachment, controller, csiNode string, err error) {
	if !strings.Contains(err.Error(), a.GetVolumeId()) {
		// Every recorded error names its volume, whatever step failed.
		err = fmt.Errorf("volume %s on node %s: %w", a.GetVolumeId(), a.GetNodeId(), err)
	}
	code := errcode.Code(err)
	class := pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL
	now := v.clock.Now()
	attempts := a.GetAttempts() + 1
	var next int64
	// A node that refused the call because another instance of the
	// plugin ID serves there now (the servers have not applied its report
	// yet) made no call: the step is tried again on the backoff, through
	// the controller the picker chooses once the servers see the change.
	if csi.UncertainCode(code) || csi.InstanceChanged(err) {
		class = pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN
		next = now.Add(v.backoff(attempts)).UnixNano()
	} else if a.GetState() == pb.AttachmentState_ATTACHMENT_STATE_DETACHING {
		// A teardown with a CSI node ID (recorded, or reported by its
		// node) has no way out but success: a fence does not skip its
		// ControllerUnpublishVolume (only one without an ID is dropped
		// when its node is off, see unpublish), and berth has no operator
		// command to drop it yet (`volume detach` is not built). So a final
		// failure is retried on the backoff too (attachmentDue), and the
		// operator sees when.
		next = now.Add(v.backoff(attempts)).UnixNano()
	}
	k := attachmentKey{a.GetVolumeId(), a.GetNodeId()}
	v.mu.Lock()
	if code == codes.Unavailable && controller != "" {
		v.avoid[k] = controller
	} else {
		delete(v.avoid, k)
	}
	v.mu.Unlock()
	v.logger.Warn("controller step failed", "volume", a.GetVolumeId(), "node", a.GetNodeId(), "state", pb.EnumWord(a.GetState()),
		"code", code, "class", pb.EnumWord(class), "attempts", attempts, "next_retry_at", retryTime(next), "error", err)
	decided, _ := snap.LatestIndex()
	v.writeAttachment(ctx, a, &pb.AttachmentUpdateCommand{
		VolumeId: a.GetVolumeId(), NodeId: a.GetNodeId(), State: a.GetState(), ControllerNodeId: controller,
		Error:    &pb.VolumeError{Message: err.Error(), Class: class, Code: pb.GrpcCode(code), FailedAt: now.UnixNano(), DecidedIndex: decided},
		Attempts: attempts, NextRetryAt: next, CsiNodeId: csiNode, UpdatedAt: now.UnixNano(),
	})
}

// writeAttachment proposes an AttachmentUpdate. A write that did not
// commit is tried again after the write retry (the call is made again:
// publish and unpublish are idempotent; the attachment is held until
// then); one the state machine refuses (the
// attachment moved on meanwhile) is left to the next pass, which sees
// where it is now.
func (v *Loops) writeAttachment(ctx context.Context, a *pb.Attachment, cmd *pb.AttachmentUpdateCommand) {
	k := attachmentKey{a.GetVolumeId(), a.GetNodeId()}
	err := v.write(ctx, fsm.AttachmentUpdate, cmd)
	switch {
	case err == nil:
		v.mu.Lock()
		delete(v.hold, k)
		if cmd.GetError() == nil {
			delete(v.avoid, k)
		}
		v.mu.Unlock()
	case ctx.Err() != nil:
	case errors.Is(err, fsm.ErrAttachmentTransition), errors.Is(err, fsm.ErrAttachmentNotFound):
		v.logger.Info("attachment moved on before its outcome was written", "volume", a.GetVolumeId(), "node", a.GetNodeId(),
			"to", pb.EnumWord(cmd.GetState()), "error", err)
	default:
		v.logger.Warn("writing attachment outcome; retrying", "volume", a.GetVolumeId(), "node", a.GetNodeId(),
			"to", pb.EnumWord(cmd.GetState()), "error", err)
		v.mu.Lock()
		v.hold[k] = v.clock.Now().Add(v.cfg.writeRetry)
		v.mu.Unlock()
		t := v.clock.AfterFunc(v.cfg.writeRetry, v.kick)
		context.AfterFunc(ctx, func() { t.Stop() })
	}
}

// nodeOff reports whether the node is down or fenced (a read error, or a
// node not found, counts as not off: the caller handles a gone node).
func nodeOff(snap *fsm.StateSnapshot, nodeID string) bool {
	n, err := snap.NodeByID(nil, nodeID)
	return err == nil && n != nil && (n.GetFenced() || n.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN)
}

// heldUntil is when a's outcome write failed plus the write retry (zero
// when none failed): no call is made for a before then.
func (v *Loops) heldUntil(a *pb.Attachment) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.hold[attachmentKey{a.GetVolumeId(), a.GetNodeId()}]
}

// errNodeGone is csiNodeID's answer for a node the servers no longer know.
var errNodeGone = errcode.New(codes.NotFound, "node is gone")

// csiNodeID returns the ID the plugin knows nodeID by (its node
// instance's NodeGetInfo), from the plugin's row or, for a node whose
// instance left the row, the node's own last report.
func csiNodeID(snap *fsm.StateSnapshot, pluginID, nodeID string) (string, error) {
	inst, err := snap.CSIPluginInstance(nil, pluginID, nodeID, false)
	if err != nil {
		return "", err
	}
	if id := inst.GetNodeInfo().GetId(); id != "" {
		return id, nil
	}
	node, err := snap.NodeByID(nil, nodeID)
	if err != nil {
		return "", err
	}
	if node == nil {
		return "", fmt.Errorf("node %s of plugin %q: %w", nodeID, pluginID, errNodeGone)
	}
	if id := node.GetCsiNodePlugins()[pluginID].GetNodeInfo().GetId(); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("node %s reports no node instance of plugin %q (its CSI node ID is unknown): %w", nodeID, pluginID, errNoCSINode)
}

// attachmentCSINode is the CSI node ID a's calls name: the one its
// publish named, else the node's current one (csiNodeID).
func attachmentCSINode(snap *fsm.StateSnapshot, a *pb.Attachment) (string, error) {
	if id := a.GetCsiNodeId(); id != "" {
		return id, nil
	}
	return csiNodeID(snap, a.GetPluginId(), a.GetNodeId())
}

// errNoCSINode is csiNodeID's answer for a node without the plugin's node
// instance: final until the node reports one.
var errNoCSINode = errcode.New(codes.FailedPrecondition, "node has no node instance of the plugin")

// publishRequest builds ControllerPublishVolume for a: the volume's
// external ID, secrets and context, the node's CSI node ID, and the
// capability of the node's live claims (every claim of a volume uses one
// access mode), read-only as attachmentReadOnly says.
func publishRequest(snap *fsm.StateSnapshot, a *pb.Attachment) (*csipb.ControllerPublishVolumeRequest, error) {
	vol, err := snap.VolumeByID(nil, a.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if vol == nil {
		return nil, fmt.Errorf("attachment of volume %s to node %s: %w", a.GetVolumeId(), a.GetNodeId(), fsm.ErrVolumeNotFound)
	}
	csiNode, err := csiNodeID(snap, a.GetPluginId(), a.GetNodeId())
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", a.GetVolumeId(), err)
	}
	claims, err := snap.ClaimsByNode(nil, a.GetNodeId())
	if err != nil {
		return nil, err
	}
	claims = slices.DeleteFunc(claims, func(c *pb.Claim) bool { return c.GetVolumeId() != a.GetVolumeId() || !rules.ClaimLive(c) })
	if len(claims) == 0 {
		return nil, fmt.Errorf("volume %s on node %s: no live claim to publish for: %w", a.GetVolumeId(), a.GetNodeId(), fsm.ErrClaimNotFound)
	}
	return &csipb.ControllerPublishVolumeRequest{
		VolumeId:         vol.GetExternalId(),
		NodeId:           csiNode,
		VolumeCapability: rules.CSICapability(claims[0].GetAccessMode(), claims[0].GetAttachmentMode(), vol.GetMountOptions()),
		Readonly:         attachmentReadOnly(claims),
		Secrets:          vol.GetSecrets(),
		VolumeContext:    vol.GetContext(),
	}, nil
}

// attachmentReadOnly says whether a node's attachment, published for its
// live claims (at least one), is published read-only. An attachment is
// published once and not again while it is attached (CSI refuses a second
// publish with another readonly flag), and its publish context goes into
// every stage and publish on the node: a plugin stages a volume attached
// read-only read-only, and every user on the node gets it so. So it is
// read-only only where no writer can ever join the node's readers: in a
// reader-only access mode. Elsewhere it is writable even while every claim
// on the node reads: each reader's NodePublishVolume is read-only, and a
// writer joining them (single-node-writer: readers and one writer on one
// node; multi-node-single-writer: the one writer placed on a readers'
// node) writes, where a read-only attachment left it a claim in use on a
// volume it could not write.
func attachmentReadOnly(claims []*pb.Claim) bool {
	for _, c := range claims {
		if c.GetMode() != pb.ClaimMode_CLAIM_MODE_READ {
			return false
		}
	}
	limits, ok := rules.AccessModeLimitsOf(claims[0].GetAccessMode())
	return !ok || !limits.Write
}

func retryTime(ns int64) string {
	if ns == 0 {
		return "none"
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}
