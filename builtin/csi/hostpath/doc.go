// Package hostpath is berth's built-in CSI plugin, hostpath.csi.berth.dev:
// volumes that are directories (mount access) or sparse image files attached
// through loop devices (block access) under a state directory on the host.
// It implements the identity, controller, group controller and node services
// of CSI 1.13 and passes csi-sanity (see SANITY.md). berth ships it so that a
// single machine (`berth run -dev`), tests and benchmarks have real CSI
// storage with the full lifecycle: create, attach, stage, publish, snapshot,
// clone, expand.
//
// # Running it
//
// Start (or Run, which blocks) serves the plugin on a unix socket until its
// context ends:
//
//	srv, err := hostpath.Start(ctx, hostpath.Config{
//		Endpoint: "unix:///run/berth/csi.sock",
//		NodeID:   "node-1",
//		StateDir: "/var/lib/berth/hostpath",
//		Capacity: 10 << 30,
//	})
//	// ... dial srv.Endpoint() ...
//	srv.Stop()
//
// `berth builtin csi-hostpath` is the same from the command line (CSI_ENDPOINT
// is honoured, as for task-launched plugins).
//
// Mode "monolith" (the default) serves every service. A state directory can
// also be shared by one "controller" process and any number of "node"
// processes, each with its own node ID: that is how several berth clients on
// one machine share volumes. The state directory's pool ID is part of every
// node's topology (PoolTopologyKey), so volumes are only ever placed on nodes
// that can reach them. File locks keep a second controller, or a second
// process for one node ID, from starting.
//
// # What is enforced
//
// A volume's access type (mount or block) is fixed when it is created; the
// access mode is chosen per attachment, since every node of a pool can reach
// every volume of it.
//
// ControllerPublishVolume records which nodes a volume is attached to and
// refuses a second node unless both attachments use a MULTI_NODE access mode,
// a second writer for single-writer modes, nodes outside the volume's
// topology and nodes at their --max-volumes limit. The publish context
// carries the node, pool, kind and read-only flag, and the node plugin
// checks them: a volume attached read-only is mounted read-only. On one node,
// NodePublishVolume follows the CSI table for repeated publishes (one target
// for SINGLE_NODE_SINGLE_WRITER, one writable target for the other
// single-writer modes, the same capability everywhere).
//
// No volume is made or expanded past MaxVolumeSize (--max-volume-size,
// default 1TiB, as the kubernetes-csi hostpath driver's --maxvolumesize):
// OutOfRange, naming the volume and the limit. Every new volume, expansion
// and snapshot copy must also fit in what the state directory's filesystem
// has free at that moment (ResourceExhausted otherwise); earlier volumes are
// not charged against it, since they take space only as they are written
// (thin provisioning). Capacity (--capacity), when set, is the hard account:
// volumes count with their capacity, snapshots with the space their copy
// takes, and what is not left of it is ResourceExhausted. GetCapacity
// reports the smaller of the two as available, and the largest volume
// CreateVolume would make now. A mount volume is a plain directory and
// cannot be stopped from growing past its capacity; the health RPCs report
// it (CapacityExceeded). Block volumes are hard limits.
//
// # State and failure
//
// Everything lives in the state directory (see the layout in state.go):
// records are written to a temporary file, fsynced and renamed; objects are
// built under temporary names and renamed into place; deletions go through a
// trash directory. A plugin killed at any point restarts with its volumes,
// snapshots, attachments and node mounts, and every node call re-checks the
// mounts and loop devices it relies on, adopting or repairing them.
// Operations on one volume are serialized; different volumes proceed in
// parallel.
//
// Errors are gRPC status codes as the CSI spec prescribes for each condition,
// with messages that name the volume, snapshot, node or path concerned.
//
// # Fault injection
//
// For tests and fault drills only, Config.DelayBefore holds every call of
// the named CSI methods that long before it runs, and Config.DelayAfter holds
// the reply after the call ran (the work is done, the caller does not know
// yet): `--delay NodeStageVolume=3s` and `--delay-after` on the command line,
// parsed by ParseDelays. With DelayMarkerDir (--delay-marker-dir) each held
// call creates a file named
// <method>.<before|after>.<volume ID or "none">.<node ID or "controller">.<pid>.<n>
// there as its hold starts, so a test waits for the call to be in flight and
// then kills whatever it means to kill, instead of sleeping and hoping. A
// caller that gives up ends the hold with its own Canceled or
// DeadlineExceeded. The acceptance test of volume faults
// (acceptance/volumes_faults_test.go) is built on it.
package hostpath
