package volumehooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// Task event types of the volume hook.
//
// Each of the node calls that bring a volume to an alloc and take it down
// is an event, stamped when the call returned: where a slow start or stop
// spent its time shows in `berth alloc status`.
const (
	EventVolumeStaged      = "Volume staged"
	EventVolumePublished   = "Volume published"
	EventVolumeUnpublished = "Volume unpublished"
	EventVolumeUnstaged    = "Volume unstaged"
	EventVolumeFailure     = "Volume failure"
	EventVolumeWaiting     = "Waiting for volume"
)

// progressEvents records the volume manager's steps for one volume as
// task events.
func progressEvents(events eventEmitter, volumeID, name string) volumemanager.Progress {
	if events == nil {
		return nil
	}
	what := fmt.Sprintf("Volume %q", volumeID)
	if name != "" {
		what += " (" + name + ")"
	}
	return func(step volumemanager.Step, at time.Time, path string) {
		switch step {
		case volumemanager.StepStaged:
			emit(events, at, EventVolumeStaged, what+" staged on the node at "+path, false)
		case volumemanager.StepPublished:
			emit(events, at, EventVolumePublished, what+" published at "+path, false)
		case volumemanager.StepUnpublished:
			emit(events, at, EventVolumeUnpublished, what+" unpublished from "+path, false)
		case volumemanager.StepUnstaged:
			emit(events, at, EventVolumeUnstaged, what+" unstaged from the node (its last user here)", false)
		}
	}
}

// Prerun brings each of the group's CSI volumes to the alloc, in the
// group's order: wait until its claim is ready (a blocking query that
// wakes on the claim, its attachment or its volume changing), wait for
// the node plugin (bounded by PluginWait), stage and publish, then queue
// the in-use report. A recovered alloc whose volume is published already
// goes straight on: its tasks may be running, and the servers need not be
// reachable for them to keep their volume. Its in-use report is queued
// again (requeueInUse): the client may have died after saving the use
// published and before queueing it, and the servers ignore it on a claim
// in use already and refuse it on one that moved on.
func (h *volumeHook) Prerun(ctx context.Context, req *runhooks.PrerunRequest) error {
	published := map[string]bool{}
	if req.Recovered {
		for _, u := range h.v.cfg.Volumes.Uses() {
			if u.User == h.allocID && u.State == pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED {
				published[u.VolumeID] = true
			}
		}
	}
	for _, cv := range h.vols {
		if published[cv.volumeID] {
			h.logger.Debug("volume published before the client restarted", "volume_id", cv.volumeID)
			h.v.requeueInUse(h.allocID, false, cv.volumeID)
			continue
		}
		if err := h.prepare(ctx, req, cv); err != nil {
			return err
		}
	}
	return nil
}

// prepare claims, waits, stages and publishes one volume.
func (h *volumeHook) prepare(ctx context.Context, req *runhooks.PrerunRequest, cv csiVolume) error {
	cfg := h.v.cfg
	where := fmt.Sprintf("volume %q (group volume %q) of alloc %s on node %s", cv.volumeID, cv.name, h.allocID, cfg.NodeID)
	resp, err := h.v.waitReady(ctx, req.Events, &pb.ClientClaimRequest{NodeId: cfg.NodeID, AllocId: h.allocID, VolumeId: cv.volumeID},
		req.Alloc.GetCreateIndex(), where)
	if err != nil {
		return err
	}
	claim, vol := resp.GetClaim(), resp.GetVolume()
	pctx, cancel := context.WithTimeout(ctx, cfg.PluginWait)
	_, err = cfg.Plugins.WaitNode(pctx, vol.GetPluginId())
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", where, ctx.Err())
		}
		err = fmt.Errorf("%s: node plugin %q not running and healthy after %s: %w (%w)", where, vol.GetPluginId(), cfg.PluginWait,
			ErrNodePluginUnavailable, err)
		h.v.failed(req.Events, claimReport(cfg.NodeID, h.allocID, "", cv.volumeID), claim.GetState(), err)
		return err
	}
	path, err := cfg.Volumes.Publish(ctx, volumemanager.PublishRequest{
		Volume: vol, User: h.allocID, AccessMode: claim.GetAccessMode(), AttachmentMode: claim.GetAttachmentMode(),
		MountOptions:   resp.GetRequest().GetMountOptions(),
		ReadOnly:       cv.readOnly || resp.GetRequest().GetReadOnly() || claim.GetMode() == pb.ClaimMode_CLAIM_MODE_READ,
		PublishContext: resp.GetPublishContext(), Progress: progressEvents(req.Events, cv.volumeID, cv.name)})
	if err != nil {
		if ctx.Err() == nil {
			h.v.failed(req.Events, claimReport(cfg.NodeID, h.allocID, "", cv.volumeID), claim.GetState(), err)
		}
		return err
	}
	h.logger.Debug("volume published", "volume_id", cv.volumeID, "path", path)
	what := fmt.Sprintf("Volume %q (%s)", cv.volumeID, cv.name)
	expanded, err := h.v.expandPending(ctx, vol, claim, req.Events, what)
	if err != nil {
		err = fmt.Errorf("%s: %w", where, err)
		if ctx.Err() == nil {
			h.v.failed(req.Events, claimReport(cfg.NodeID, h.allocID, "", cv.volumeID), claim.GetState(), err)
		}
		return err
	}
	report := claimReport(cfg.NodeID, h.allocID, "", cv.volumeID)
	report.State, report.NodeExpandedBytes = pb.ClaimState_CLAIM_STATE_IN_USE, expanded
	cfg.Reports.QueueInUse(report)
	return nil
}

func claimReport(nodeID, allocID, claimID, volumeID string) *pb.ClientClaimUpdateRequest {
	return &pb.ClientClaimUpdateRequest{NodeId: nodeID, AllocId: allocID, ClaimId: claimID, VolumeId: volumeID}
}

// waitReady asks for the claim until it is ready (or in use), blocking on
// the servers while it is reserved. Servers that do not answer are
// retried with backoff; a refusal is the answer.
func (v *VolumeHooks) waitReady(ctx context.Context, events eventEmitter, req *pb.ClientClaimRequest, createIndex uint64, where string) (*pb.ClientClaimResponse, error) {
	// Anything at or after the alloc's creation answers at once; a server
	// that has not applied the alloc yet waits for it.
	var minIndex uint64
	if createIndex > 0 {
		minIndex = createIndex - 1
	}
	failures := 0 // consecutive unanswered asks
	told := false
	// last is the servers' last answer, for what the claim was waiting on
	// when the wait ends.
	var last *pb.ClientClaimResponse
	for {
		req.Query = &pb.QueryOptions{MinIndex: minIndex}
		resp, err := v.cfg.Claims.ClientClaim(ctx, req)
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%s: waiting for its claim to be ready%s: %w", where, waitingOn(last), ctx.Err())
		case err != nil && claimRefusal(err):
			return nil, fmt.Errorf("%s: asking the servers for its claim: %w", where, err)
		case err != nil:
			failures++
			wait := v.cfg.retry().Delay(failures)
			v.logger.Warn("asking the servers for a claim", "volume_id", req.GetVolumeId(), "alloc_id", req.GetAllocId(),
				"claim_id", req.GetClaimId(), "retry_in", wait, "error", err)
			if !backoff.Sleep(ctx.Done(), wait) {
				return nil, fmt.Errorf("%s: waiting for its claim to be ready: %w (last error: %w)", where, ctx.Err(), err)
			}
			continue
		}
		failures = 0
		last = resp
		switch st := resp.GetClaim().GetState(); st {
		case pb.ClaimState_CLAIM_STATE_READY, pb.ClaimState_CLAIM_STATE_IN_USE:
			return resp, nil
		case pb.ClaimState_CLAIM_STATE_RESERVED:
			if !told && events != nil {
				told = true
				msg := "Waiting for the claim of volume " + fmt.Sprintf("%q", req.GetVolumeId()) + " to be ready"
				if e := resp.GetClaim().GetLastError(); e != nil {
					msg += ": " + e.GetMessage()
				}
				emit(events, v.cfg.Now(), EventVolumeWaiting, msg, false)
			}
			minIndex = max(minIndex, resp.GetMeta().GetIndex())
		default:
			return nil, fmt.Errorf("%s: claim %q is %s: %w", where, resp.GetClaim().GetId(), pb.EnumWord(st), ErrClaimReleased)
		}
	}
}

// waitingOn says what a reserved claim waits for, from the servers' last
// answer: its attachment's state and the last error of the claim.
func waitingOn(last *pb.ClientClaimResponse) string {
	if last == nil {
		return ""
	}
	s := fmt.Sprintf(" (claim %q is %s", last.GetClaim().GetId(), pb.EnumWord(last.GetClaim().GetState()))
	if a := last.GetAttachmentState(); a != pb.AttachmentState_ATTACHMENT_STATE_UNSPECIFIED {
		s += ", the volume's attachment to the node " + attachmentWord(a)
	}
	if e := last.GetClaim().GetLastError(); e != nil {
		s += ", last error: " + e.GetMessage()
	}
	return s + ")"
}

func attachmentWord(a pb.AttachmentState) string {
	switch a {
	case pb.AttachmentState_ATTACHMENT_STATE_ATTACHING:
		return "attaching (controller publish not done)"
	}
	return pb.EnumWord(a)
}

// claimRefusal says whether the servers' error is their answer rather
// than a failure to answer: errcode.ClaimRefusal, which keeps retrying the
// AlreadyExists and OutOfRange that errcode.Refusal would give up on.
func claimRefusal(err error) bool {
	return errcode.ClaimRefusal.Has(errcode.Code(err))
}

// eventEmitter records task events (runhooks.Emitter).
type eventEmitter interface{ EmitEvent(*pb.TaskEvent) }

func emit(e eventEmitter, now time.Time, typ, msg string, failed bool) {
	if e == nil {
		return
	}
	e.EmitEvent(&pb.TaskEvent{Type: typ, OccurredAt: now.UnixNano(), Message: msg, Failed: failed})
}

// failed shows err on the claim (a failed try, with the claim's current
// state) and as a task event.
func (v *VolumeHooks) failed(events eventEmitter, report *pb.ClientClaimUpdateRequest, state pb.ClaimState, err error) {
	emit(events, v.cfg.Now(), EventVolumeFailure, err.Error(), false)
	class := pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL
	if csi.IsUncertain(err) {
		class = pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN
	}
	var code codes.Code
	var ce *csi.Error
	if errors.As(err, &ce) {
		code = ce.Code
	} else {
		code = errcode.Code(err)
	}
	report.State = state
	report.Error = &pb.VolumeError{Message: err.Error(), Class: class, Code: pb.GrpcCode(code), FailedAt: v.cfg.Now().UnixNano()}
	v.cfg.Reports.Queue(report)
}
