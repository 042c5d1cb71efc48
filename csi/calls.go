package csi

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
)

// Call names a CSI RPC: the method's name in its service. It appears in
// errors and log lines, and keys the call table (Calls).
type Call string

// The CSI RPCs the client makes.
const (
	CallGetPluginInfo         Call = "GetPluginInfo"
	CallGetPluginCapabilities Call = "GetPluginCapabilities"
	CallProbe                 Call = "Probe"

	CallCreateVolume               Call = "CreateVolume"
	CallDeleteVolume               Call = "DeleteVolume"
	CallControllerPublishVolume    Call = "ControllerPublishVolume"
	CallControllerUnpublishVolume  Call = "ControllerUnpublishVolume"
	CallValidateVolumeCapabilities Call = "ValidateVolumeCapabilities"
	CallListVolumes                Call = "ListVolumes"
	CallGetCapacity                Call = "GetCapacity"
	CallControllerGetCapabilities  Call = "ControllerGetCapabilities"
	CallControllerGetVolume        Call = "ControllerGetVolume"
	CallControllerExpandVolume     Call = "ControllerExpandVolume"
	CallCreateSnapshot             Call = "CreateSnapshot"
	CallDeleteSnapshot             Call = "DeleteSnapshot"
	CallListSnapshots              Call = "ListSnapshots"

	CallNodeStageVolume     Call = "NodeStageVolume"
	CallNodeUnstageVolume   Call = "NodeUnstageVolume"
	CallNodePublishVolume   Call = "NodePublishVolume"
	CallNodeUnpublishVolume Call = "NodeUnpublishVolume"
	CallNodeGetVolumeStats  Call = "NodeGetVolumeStats"
	CallNodeExpandVolume    Call = "NodeExpandVolume"
	CallNodeGetCapabilities Call = "NodeGetCapabilities"
	CallNodeGetInfo         Call = "NodeGetInfo"
)

// Service is the CSI service a call belongs to, as the spec's csi.proto
// names it.
type Service string

// The CSI services the client calls.
const (
	ServiceIdentity   Service = "Identity"
	ServiceController Service = "Controller"
	ServiceNode       Service = "Node"
)

// CallSpec is one row of the call table: everything berth decides per CSI
// call, in one place. The client reads it: every call runs under its
// Deadline (unless WithTimeouts overrides it), csi.Retry repeats a call only
// on its RetryOn codes, and the typed clients answer success for NotFound
// where NotFoundIsSuccess says so. csi/CALLS.md shows the table; a test
// writes it from Calls and fails when it is stale.
type CallSpec struct {
	Call    Call
	Service Service
	// Deadline bounds each attempt. A sooner deadline on the caller's
	// context wins.
	Deadline time.Duration
	// RetryOn is the class of gRPC codes on which a failed call may be
	// made again: those that leave its outcome unknown or pass with time.
	// csi.Retry repeats on them and nothing else; a caller that repeats a
	// call by hand asks Call.Retryable. Every code outside it is final.
	RetryOn errcode.Class
	// NotFoundIsSuccess makes the plugin's NotFound a success: the call is
	// to undo something, and the plugin says it is not there.
	NotFoundIsSuccess bool
	// RetriedBy says whether berth makes the call again after a failure,
	// and who does.
	RetriedBy string
	// Safe is why making the call again is safe, in the CSI spec's words
	// (spec v1.13.0, spec.md).
	Safe string
}

// FullMethod is the call's gRPC method name ("/csi.v1.Node/NodeStageVolume").
func (s CallSpec) FullMethod() string {
	return "/csi.v1." + string(s.Service) + "/" + string(s.Call)
}

// The spec's words the Safe texts quote.
const (
	specRetry = `"Any of the RPCs defined in this spec MAY timeout and MAY be retried." (Timeouts)`
	readOnly  = "It only reads: nothing changes on the plugin. " + specRetry
	mustIdem  = `"This operation MUST be idempotent."`
)

// Deadline classes. Identity and capability calls are short because a
// healthy plugin answers them from memory; lookups may ask a storage system;
// attach and mount calls may wait on one; create, delete, expand and
// snapshot may move data.
const (
	deadlineProbe   = 5 * time.Second
	deadlineInfo    = 10 * time.Second
	deadlineLookup  = 30 * time.Second
	deadlineAttach  = 2 * time.Minute
	deadlineProvide = 5 * time.Minute
)

// Who makes the calls again.
const (
	byFingerprint = "Polled: the plugin manager fingerprints every plugin each refresh, and sooner, backing off, after any failure."
	byVolumeMgr   = "Yes: the client's volume manager repeats it with csi.Retry (capped exponential backoff with jitter) until it succeeds, fails for good or the caller's context ends."
)

// callTable is the table, in the order CALLS.md shows it: by service as
// csi.proto lists them.
var callTable = []CallSpec{
	{
		Call: CallGetPluginInfo, Service: ServiceIdentity, Deadline: deadlineInfo, RetryOn: errcode.Uncertain,
		RetriedBy: byFingerprint + " A plugin task's supervisor asks it after a ready Probe, until the plugin registers.",
		Safe:      readOnly,
	},
	{
		Call: CallGetPluginCapabilities, Service: ServiceIdentity, Deadline: deadlineInfo, RetryOn: errcode.Uncertain,
		RetriedBy: byFingerprint,
		Safe:      readOnly,
	},
	{
		Call: CallProbe, Service: ServiceIdentity, Deadline: deadlineProbe, RetryOn: errcode.Uncertain,
		RetriedBy: byFingerprint + " A plugin task's supervisor and a storage adapter's health check (its own gRPC client, with this deadline) probe on their own intervals.",
		Safe:      readOnly,
	},
	{
		Call: CallCreateVolume, Service: ServiceController, Deadline: deadlineProvide, RetryOn: errcode.CreateUncertain,
		RetriedBy: "Yes: `volume create` (on the servers) makes it again, a bounded number of times with backoff, through the same controller instance only; ResourceExhausted is the plugin's final answer that it cannot provision.",
		Safe: mustIdem + ` "If a volume corresponding to the specified volume ` + "`name`" + ` already exists, is accessible from ` + "`accessibility_requirements`" +
			`, and is compatible with the specified ` + "`capacity_range`, `volume_capabilities`, `parameters` and `mutable_parameters`" +
			` in the ` + "`CreateVolumeRequest`" + `, the Plugin MUST reply ` + "`0 OK`" + ` with the corresponding ` + "`CreateVolumeResponse`" + `."`,
	},
	{
		Call: CallDeleteVolume, Service: ServiceController, Deadline: deadlineProvide, RetryOn: errcode.Uncertain, NotFoundIsSuccess: true,
		RetriedBy: "No: `volume delete` fails with the error; after an uncertain one the volume stays marked deleting and takes no claim, for the operator to delete again.",
		Safe: mustIdem + ` "If a volume corresponding to the specified ` + "`volume_id`" +
			` does not exist or the artifacts associated with the volume do not exist anymore, the Plugin MUST reply ` + "`0 OK`" + `."`,
	},
	{
		Call: CallControllerPublishVolume, Service: ServiceController, Deadline: deadlineAttach, RetryOn: errcode.Uncertain,
		RetriedBy: "Yes: the servers' attach reconciler makes it again at the attachment's next_retry_at (capped exponential backoff with jitter), and after a final error once the volume, its plugin or a node changes; the reconcile pass publishes again what the controller does not list.",
		Safe: mustIdem + ` "If the volume corresponding to the ` + "`volume_id`" + ` has already been published at the node corresponding to the ` + "`node_id`" +
			`, and is compatible with the specified ` + "`volume_capability` and `readonly`" + ` flag, the Plugin MUST reply ` + "`0 OK`" + `."`,
	},
	{
		Call: CallControllerUnpublishVolume, Service: ServiceController, Deadline: deadlineAttach, RetryOn: errcode.Uncertain, NotFoundIsSuccess: true,
		RetriedBy: "Yes: the servers' attach reconciler makes it again at the attachment's next_retry_at, after final errors too (a detach has no way out but success); the reconcile pass unpublishes orphans each pass.",
		Safe: mustIdem + ` "If the volume corresponding to the ` + "`volume_id`" + ` is not attached to the node corresponding to the ` + "`node_id`" +
			`, the Plugin MUST reply ` + "`0 OK`" + `." "If this operation failed, or the CO does not know if the operation failed or not, it can choose to call ` +
			"`ControllerUnpublishVolume`" + ` again."`,
	},
	{
		Call: CallValidateVolumeCapabilities, Service: ServiceController, Deadline: deadlineLookup, RetryOn: errcode.Uncertain,
		RetriedBy: "No: `volume register` fails with the error.",
		Safe:      mustIdem + " It only reads.",
	},
	{
		Call: CallListVolumes, Service: ServiceController, Deadline: deadlineLookup, RetryOn: errcode.Uncertain,
		RetriedBy: "Polled: the servers' reconcile pass lists every page each pass; a failed pass is done again at the next.",
		Safe:      readOnly,
	},
	{
		Call: CallGetCapacity, Service: ServiceController, Deadline: deadlineLookup, RetryOn: errcode.Uncertain,
		RetriedBy: "No caller in berth retries it.",
		Safe:      readOnly,
	},
	{
		Call: CallControllerGetCapabilities, Service: ServiceController, Deadline: deadlineInfo, RetryOn: errcode.Uncertain,
		RetriedBy: byFingerprint,
		Safe:      readOnly,
	},
	{
		Call: CallCreateSnapshot, Service: ServiceController, Deadline: deadlineProvide, RetryOn: errcode.CreateUncertain,
		RetriedBy: "No: `volume snapshot create` fails with the error; creating it again by the same name is safe.",
		Safe: mustIdem + ` "If a snapshot corresponding to the specified snapshot ` + "`name`" + ` is successfully cut and ready to use (...), and is usable from ` +
			"`accessibility_requirements`" + `, the Plugin MUST reply ` + "`0 OK`" + ` with the corresponding ` + "`CreateSnapshotResponse`" + `."`,
	},
	{
		Call: CallDeleteSnapshot, Service: ServiceController, Deadline: deadlineProvide, RetryOn: errcode.Uncertain, NotFoundIsSuccess: true,
		RetriedBy: "No: `volume snapshot delete` fails with the error.",
		Safe: mustIdem + ` "If a snapshot corresponding to the specified ` + "`snapshot_id`" +
			` does not exist or the artifacts associated with the snapshot do not exist anymore, the Plugin MUST reply ` + "`0 OK`" + `."`,
	},
	{
		Call: CallListSnapshots, Service: ServiceController, Deadline: deadlineLookup, RetryOn: errcode.Uncertain,
		RetriedBy: "No: `volume snapshot list` fails with the error.",
		Safe:      readOnly,
	},
	{
		Call: CallControllerExpandVolume, Service: ServiceController, Deadline: deadlineProvide, RetryOn: errcode.Uncertain,
		RetriedBy: "No: `volume expand` fails with the error, to expand again.",
		Safe:      mustIdem + ` "If a volume corresponding to the specified volume ID is already larger than or equal to the target capacity of the expansion request, the plugin SHOULD reply 0 OK."`,
	},
	{
		Call: CallControllerGetVolume, Service: ServiceController, Deadline: deadlineLookup, RetryOn: errcode.Uncertain,
		RetriedBy: "No caller in berth retries it.",
		Safe:      readOnly,
	},
	{
		Call: CallNodeStageVolume, Service: ServiceNode, Deadline: deadlineAttach, RetryOn: errcode.Uncertain,
		RetriedBy: byVolumeMgr,
		Safe: mustIdem + ` "If the volume corresponding to the ` + "`volume_id`" + ` is already staged to the ` + "`staging_target_path`" +
			`, and is identical to the specified ` + "`volume_capability`" + ` the Plugin MUST reply ` + "`0 OK`" + `."`,
	},
	{
		Call: CallNodeUnstageVolume, Service: ServiceNode, Deadline: deadlineAttach, RetryOn: errcode.Uncertain, NotFoundIsSuccess: true,
		RetriedBy: byVolumeMgr,
		Safe: mustIdem + ` "If the volume corresponding to the ` + "`volume_id`" + ` is not staged to the ` + "`staging_target_path`" +
			`,  the Plugin MUST reply ` + "`0 OK`" + `."`,
	},
	{
		Call: CallNodePublishVolume, Service: ServiceNode, Deadline: deadlineAttach, RetryOn: errcode.Uncertain,
		RetriedBy: byVolumeMgr,
		Safe: mustIdem + ` "If the volume corresponding to the ` + "`volume_id`" + ` has already been published at the specified ` + "`target_path`" +
			`, and is compatible with the specified ` + "`volume_capability` and `readonly`" + ` flag, the Plugin MUST reply ` + "`0 OK`" + `."`,
	},
	{
		Call: CallNodeUnpublishVolume, Service: ServiceNode, Deadline: deadlineAttach, RetryOn: errcode.Uncertain, NotFoundIsSuccess: true,
		RetriedBy: byVolumeMgr,
		Safe: mustIdem + ` "If this RPC failed, or the CO does not know if it failed or not, it can choose to call ` +
			"`NodeUnpublishVolume`" + ` again."`,
	},
	{
		Call: CallNodeGetVolumeStats, Service: ServiceNode, Deadline: deadlineLookup, RetryOn: errcode.Uncertain,
		RetriedBy: "No caller in berth retries it.",
		Safe:      readOnly,
	},
	{
		Call: CallNodeExpandVolume, Service: ServiceNode, Deadline: deadlineProvide, RetryOn: errcode.Uncertain,
		RetriedBy: byVolumeMgr + " The servers' CSI forwarder sends `volume expand`'s call to the node again while no server holds the node's tunnel; a node that failed is asked again by the next `volume expand`, and a pending expansion by the node's next stage.",
		Safe:      mustIdem + ` "If a volume corresponding to the specified volume ID is already larger than or equal to the target capacity of the expansion request, the plugin SHOULD reply 0 OK."`,
	},
	{
		Call: CallNodeGetCapabilities, Service: ServiceNode, Deadline: deadlineInfo, RetryOn: errcode.Uncertain,
		RetriedBy: byFingerprint,
		Safe:      readOnly,
	},
	{
		Call: CallNodeGetInfo, Service: ServiceNode, Deadline: deadlineInfo, RetryOn: errcode.Uncertain,
		RetriedBy: byFingerprint,
		Safe:      readOnly,
	},
}

// callIndex finds a call's row.
var callIndex = func() map[Call]*CallSpec {
	m := make(map[Call]*CallSpec, len(callTable))
	for i := range callTable {
		m[callTable[i].Call] = &callTable[i]
	}
	return m
}()

// Calls returns a copy of the call table, in the order CALLS.md shows it.
func Calls() []CallSpec { return append([]CallSpec(nil), callTable...) }

// Spec returns the call's row of the table; false for a call not in it.
func (c Call) Spec() (CallSpec, bool) {
	if s, ok := callIndex[c]; ok {
		return *s, true
	}
	return CallSpec{}, false
}

// fallbackTimeout bounds a call missing from the table, so that no call is
// ever made without a deadline.
const fallbackTimeout = 2 * time.Minute

// Deadline is the deadline of each attempt of the call: the table's, or two
// minutes for a call not in it.
func (c Call) Deadline() time.Duration {
	if s, ok := callIndex[c]; ok {
		return s.Deadline
	}
	return fallbackTimeout
}

// retryOn is the call's RetryOn class; errcode.Uncertain for a call not in
// the table.
func (c Call) retryOn() errcode.Class {
	if s, ok := callIndex[c]; ok {
		return s.RetryOn
	}
	return errcode.Uncertain
}

// Retryable reports whether the call may be made again after failing with
// err: err's code (see IsUncertain for how it is found) is in the call's
// RetryOn class. A nil error is not retryable.
func (c Call) Retryable(err error) bool {
	return err != nil && c.retryOn().Has(errCode(err))
}

// NotFoundIsSuccess reports whether the plugin's NotFound is a success for
// the call.
func (c Call) NotFoundIsSuccess() bool {
	s, ok := callIndex[c]
	return ok && s.NotFoundIsSuccess
}

// errCode is the gRPC code that classes err: an *Error's code;
// Unavailable for ErrPluginShutdown; Canceled and DeadlineExceeded for the
// context's errors; otherwise status.Code.
func errCode(err error) codes.Code {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, ErrPluginShutdown):
		return codes.Unavailable
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return status.Code(err)
}

// Timeouts maps a call to the deadline each attempt of it gets, overriding
// the table's (WithTimeouts). A deadline already on the caller's context
// wins when it is sooner.
type Timeouts map[Call]time.Duration

// DefaultTimeouts returns a fresh copy of the table's deadlines, by call.
func DefaultTimeouts() Timeouts {
	t := make(Timeouts, len(callTable))
	for _, s := range callTable {
		t[s.Call] = s.Deadline
	}
	return t
}

// of is the deadline of c: its entry when positive, two minutes for a zero
// or negative entry (WithTimeouts), the table's for a call without one.
func (t Timeouts) of(c Call) time.Duration {
	d, ok := t[c]
	switch {
	case ok && d > 0:
		return d
	case ok:
		return fallbackTimeout
	}
	return c.Deadline()
}
