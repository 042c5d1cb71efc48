// Package volumeloops holds the leader's volume loops and the controller
// picker they share with the volume endpoints.
//
// While the server leads, Loops.Run runs three loops over the replicated
// state: the attach reconciler (attach.go) makes the controller calls an
// attachment waits for (ControllerPublishVolume, ControllerUnpublishVolume)
// and writes each outcome back; the reaper (reaper.go) forces releasing
// claims on a node down past force_detach_after, fenced or gone to
// node-detached; the reconcile pass (reconcile.go) compares what a
// controller says is published with the attachments and repairs the drift.
// Uncertain failures are retried on internal/backoff's doubling with the
// loops' own jitter.
//
// The server core builds one Loops for its whole life with New, over a
// Core (the local state store and the leader's proposals) and a
// ControllerCaller, the way controller calls reach a plugin's controller
// instance on a client (clientproxy.CSIForwarder in production; tests pass
// volumetest.Controller). A nil caller runs the reaper alone.
//
// PickController chooses the controller instance a call goes through: one
// that advertises the capability the call needs (Cap), healthy, on a
// ready, unfenced node, the least loaded first. ClientVia wraps a
// ControllerCaller in csi's typed client, so the volume endpoints' calls
// get its deadlines and error classes too.
package volumeloops
