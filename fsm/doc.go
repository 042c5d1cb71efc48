// Package fsm is berth's replicated state machine: the raft commands, the
// functions that apply them, the state store they change, and the snapshot
// format that carries the whole state between servers.
//
// # Commands
//
// A raft log entry is one byte of MessageType followed by the protobuf
// encoding of that command's message (rpc/proto/berth/v1/commands.proto),
// decoded with proto.Unmarshal and nothing else: a second decoder that
// accepted bytes the real one refuses could store a row no server can read
// back. Proposers build entries with Encode and turn raft's future into the
// applied index or the command's error with ResultOf:
//
//	buf, err := fsm.Encode(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{
//		NodeId: id, Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: now.UnixNano(),
//	})
//	...
//	index, err := fsm.ResultOf(ctx, r.Apply(buf, timeout))
//	if errors.Is(err, fsm.ErrNodeNotFound) { ... }
//
// Command numbers are append-only. A server too old to know a type skips
// it when it has IgnoreUnknownFlag set and fails the entry with
// ErrUnknownCommand otherwise. FSM implements raft.BatchingFSM and applies
// a batch of entries in one transaction, so an apply function checks
// everything that can refuse its command before it writes: a refused
// command may share the batch only because it wrote nothing (one that
// fails after writing makes the batch redo itself entry by entry).
//
// Apply is deterministic: no I/O, no clock, no randomness (make check
// enforces it); times and IDs travel inside commands. It never panics. A
// server that wants a latency metric per command wraps the FSM and times
// ApplyLog, labelling with the result's Type.
//
// # State store
//
// StateStore holds the tables in go-memdb. A table is declared once, in
// state_schema.go, with newTable: its rows are protobuf messages of one
// type, its primary key one or more string fields, and it may have
// secondary indexes over one or more string fields, unique or not. Rows are
// shared by every reader and never mutated: an update stores a changed
// proto.Clone. Every row carries the raft index that created it and the
// one that last changed it; the index table holds each table's last change.
//
// Reads are typed helpers on a table and its indexes (first, list by all
// key parts or a prefix, page from a lower bound), taking an optional
// memdb.WatchSet; BlockingQuery re-runs one on a fresh StateSnapshot until
// its index passes the caller's. Apply functions read through the same
// helpers with their writeTxn, which reads the batch's write transaction:
// every index sees every row written earlier in the batch. A read by whole
// primary key is answered from the rows the transaction wrote, else from
// the last commit, without reading through the write transaction: go-memdb
// clones the index such a read touches, which makes the next insert into
// it copy its whole path again (writeTxn.written says more). insertRow and
// deleteRow are the only writers, and keep those rows.
//
// # Jobs, evaluations and allocations
//
// Tables (state_schema.go): jobs holds each job's current version by ID;
// job_versions the last JobVersionsKept (6) versions by job ID and version
// (a fixed-width decimal key part, so versions sort as numbers and a job's
// versions are a prefix read); evals by ID, indexed by job and by status
// (the broker restores pending and blocked evals from EvalsByStatus);
// allocs by ID, indexed by node, job and eval; node_alloc_index one
// pb.TableIndex per node (its table field holds the node ID): the index of
// the last server-side change to the node's allocs.
//
// node_usage (state_usage.go) is derived, not stored: one pb.NodeUsage per
// node with allocs that are not terminal, the sums of their cpu and memory
// and their count. A table's derive hook keeps it in the transaction of
// every insert and delete of an alloc, Restore rebuilds it from the allocs,
// and no snapshot carries it, so it is a function of the allocs alone and
// the table rule has nothing to say about it (no server ever reads it from
// another). StateStore.Index does not know it; NodeUsage reads it.
// allocs_freed (state_allocs_freed.go) is derived likewise: one row, the
// high-water mark of the index at which an alloc became terminal or was
// changed by the servers (a client's later writes of a terminal alloc do
// not count; a restore, which cannot tell, counts a terminal alloc's last
// write), which the leader's blocked-evaluation feed reads
// (AllocsFreedIndex) instead of every alloc. A GC does not lower it and a
// restore rebuilds it from the allocs, so servers may disagree on it; only
// the local leader's feed reads it. volume_room (state_volume_room.go) is
// the same kind of mark for volumes: the index at which a claim or an
// attachment row was last removed (VolumeRoomIndex), kept by the claims
// and attachments tables' derive; a restore counts the tables' last
// change.
//
// Every row's create and modify indexes are set by the apply. A job also
// has job_modify_index, moved only by changes to its specification
// (register, stop, revert; check-index compares with it), never by status.
// An alloc also has alloc_modify_index, moved only by server-side changes
// (placement, in-place update, stop or loss, desired transition): a
// client update moves modify_index alone. The node_alloc_index row moves
// with them (and with a GC removal), so a client's blocking query on
// NodeAllocsIndex wakes only for what the servers changed on its node.
//
// Commands: JobRegister (a new version, previous + 1 or 0, not stopped;
// enforce_index refuses with ErrJobChanged), JobDeregister (stop: a new
// version with stop set; purge: the job and its versions go, evals and
// allocs stay for GC), JobRevert (a kept version registered again as a
// new one), EvalUpsert, PlanApply, AllocClientUpdate, AllocDesiredTransition,
// NodeEligibility, NodeDrain, GC; NodeStatusUpdate creates its evals. Each
// command that carries evals creates them in the same apply, and every
// change to allocs or evals recomputes the status of their jobs
// (recomputeJobStatus: running while an alloc is not terminal, else
// pending while an eval is live, else dead once stopped or evaluated).
// An AllocClientUpdate with batch set carries many nodes' updates in one
// entry (the leader's batcher, host/server/endpoints/alloc_update_batch.go,
// once every server is at 0.1.0-dev.4): each part is applied as its own
// command would be, a refused part changes nothing and the rest apply, and
// the entry answers a *pb.AllocClientUpdateBatchResult (not stored) naming
// the refused parts (apply_alloc_batch.go). The gate cannot tell a
// 0.1.0-dev.4 build from before batching (it reports the same version) from
// one after: such a server ignores the unknown batch field, sees no node ID
// and refuses the entry without writing (applyAllocClientUpdate,
// ErrInvalidCommand, logged at Debug only), so its state silently lacks
// every batched node's alloc statuses, claim moves and evals until it next
// installs a snapshot; the same holds for one that joins later and replays
// batched entries from the log. 0.1.0-dev.4 is unreleased, so this is a
// development cluster's hazard only: replace every pre-batch dev.4 server
// together (or restore the cluster from a snapshot) rather than roll them.
//
// PlanApply is the last word on placements. It re-checks each node the
// plan touches against the state of the apply itself, which includes the
// commands applied earlier in its raft batch: new placements need the
// node ready, eligible and not draining (rules.NodeSchedulable), in-place
// updates need it registered and not down, and the node's allocs that are
// not terminal, less those the plan stops or updates there, plus the
// plan's, must fit (rules.AllocsFit's rule, the scheduler's own; the node's
// node_usage row is the sum, so the check reads one row however many
// allocs the node holds). Stops never
// refuse: marking the allocs of a down node lost is what they are for. A
// refusing node takes neither its placements nor its stops; the others
// apply (all_at_once: none do). The evals travel with the plan and are
// upserted only when no node refused. The answer, a *pb.PlanResult in
// ApplyResult.Response, lists the refused nodes with reasons naming the
// node and the exhausted dimension; PlanResultOf reads it. A plan placing
// allocs of a job that is gone (ErrJobNotFound) or of a version
// job_versions does not hold (ErrJobVersionNotFound) is refused whole,
// and so is one proposed with refuse_unseen_history whose snapshot_index
// is above the store's latest index (ErrPlanUnseenHistory: made before an
// operator's snapshot restore replaced the state it was made from). The
// leader sets that flag only once every server knows the rule.
//
// Client updates are trusted only for their own node (ErrAllocNodeMismatch),
// skip allocs already collected, and never move a terminal client status
// (complete, failed, lost) back. GC removes only what is still collectable
// when it applies (apply_gc.go states the rules); GCCandidates proposes
// what is. These tables are new: under the table rule below, their
// commands, and NodeStatusUpdate's evals, are proposed only once every
// server knows them.
//
// # CSI plugins
//
// The csi_plugins table (apply_csi.go, readers CSIPluginByID and
// CSIPluginsPage) holds one pb.CSIPlugin per plugin ID, derived from the
// nodes' fingerprints and the allocs that run the plugin:
//
//   - NodeCSIUpdate (16) replaces a node's csi_controller_plugins and
//     csi_node_plugins and, in the same apply, every row the node had or
//     has: its instances by node ID. NodeRegister keeps a stored node's
//     plugin set (the command owns it). A node that goes down keeps its
//     instances, marked unhealthy ("node is down"), as Nomad keeps them;
//     back to ready (status update or registration) they are restored
//     from its last report. A deregistered node's instances go.
//   - An alloc whose group has a task with a csi_plugin block, that is not
//     terminal and whose job is stored and not stopped, is one of the
//     row's allocations (its type merged over the group's tasks: a
//     controller and a node task make a monolith). PlanApply,
//     AllocClientUpdate and GC refile the allocs they change
//     (csiAllocsChanged); JobRegister, JobDeregister and JobRevert the
//     job's allocs when the new or previous version runs a plugin; a purge
//     removes the job's allocs from every row. With no row in the table
//     this costs PlanApply one read.
//   - Derived on every change. A row marked derived_from_serving (by a
//     NodeCSIUpdate the leader proposed with derive_from_serving, once
//     every server knows the rule; never unmarked) is derived from the
//     instances serving now and from nothing earlier, as below; an
//     unmarked row keeps the older servers' rule (controller_required
//     kept once any instance said so, the provider of the last healthy
//     instance kept), so servers of two versions never diverge
//     (testdata/plugin_facts_rolling_upgrade.txt): healthy counts; expected counts, the allocations
//     by type (monolith counts for both) plus the instances no alloc runs
//     (storage adapters); provider and version of the first healthy
//     instance, else of the first instance; controller_required when a
//     controller instance says so (only a controller service can say
//     whether it publishes, and only once fingerprinted: an instance
//     reporting no controller_info has no word,
//     testdata/controller_unfingerprinted.txt); each allocation's health
//     (its instance on its node is healthy); schedulable, a healthy node
//     instance and, when required, a healthy controller. With no
//     controller instance that has a word the row keeps what its last
//     controllers said: in a split
//     deployment whose controllers are gone for a moment, claims must
//     still wait for a publish. A row with no instances and no
//     allocations is deleted; a row that did not change is not written.
//     Its volumes keep their controller_required mirror, and a row
//     created again starts with controller_required when one of the
//     plugin's volumes has it, so a node instance reporting before any
//     controller cannot make claims skip the publish
//     (testdata/controller_required.txt). When the controllers serving
//     now stop requiring the publish (a task-launched plugin replaced a
//     storage adapter of the same ID), the plugin's attaching attachments
//     are removed and their reserved claims made ready in the same apply
//     (skipControllerPublish, testdata/plugin_switch.txt). A publish in
//     flight then that succeeds is stored as a detaching attachment, so
//     the reconciler undoes it on the old backend (storeOrphanedPublish,
//     derived rows only; testdata/plugin_switch_publish_succeeds.txt); a
//     new claim on that volume and node waits for it to go.
//
// Under the table rule only NodeCSIUpdate creates rows; the other commands
// update rows that exist, so an older server, which has none, applies them
// alike. A row NodeCSIUpdate creates starts with the allocs of the jobs
// whose current version runs the plugin, so allocs placed before any node
// reported the plugin are counted.
//
// Where the instances are (csi_instances.go, csi_plugin_allocs.go): while
// every server in the servers table has recorded pluginInstancesSince
// (0.1.0-dev.4) or later (decided in the apply, as claimStateSince is), a
// row's instances are rows of csi_plugin_instances (pb.CSIPluginInstance,
// by plugin, side and node; indexes by health and provider give the row's
// provider in one lookup) and its allocations rows of csi_plugin_allocs
// (pb.CSIPluginAllocRow, by plugin and alloc, indexed by job), the row
// holds neither, and an apply updates its facts from the rows it changed
// (counts by difference, controller_required from the controllers alone;
// an allocation's health is derived by the read, not stored): a node
// event costs the same at 5,000 nodes as at 100, for a storage adapter
// and for a node plugin run by a system job (one allocation a node)
// alike, where re-deriving the whole row cost O(nodes) (issue 25;
// BenchmarkApplyNodeCSIUpdate). Otherwise the row holds them (controllers,
// nodes, allocations), as an older server writes it. A row holding an
// instance or an allocation is inline, one holding none is split (or has
// none), so the message needs no mark; the first apply touching a row of
// the other form converts it, with its indexes and without marking the
// table changed when nothing a read shows changes (csiReform). An inline
// row restored from an older snapshot is split at its first event once
// the gate holds; a split row is joined back when the servers table
// records an older version again: that serves servers running this code
// that read an older servers table (a restored operator snapshot), not
// older binaries, which never had the rows. CSIPluginByID answers with
// the instances and allocations in either form; CSIPluginFacts,
// CSIPluginInstance and CSIPluginControllers read less, and
// CSIPluginsPage may omit them: a facts reader's controllers, nodes and
// allocations are empty or full by the row's form, so no caller may rely
// on them. RestoreStrict (an operator's snapshot, checked before raft is
// given it) refuses plugin rows that break the invariant the applies keep
// (checkPluginRows: one form a row, no instance or allocation row without
// its plugin row, facts that the rows derive); Restore (raft's: a
// server's own snapshot at start-up, InstallSnapshot) logs them at Error
// and rebuilds them from their instance and allocation rows, the same on
// every server (csi_plugin_repair.go), so an apply's drift costs a log
// line, not every restarted server.
// Both forms give every script the same output (TestScriptsSplitPlugins,
// TestPluginInstancesGateFollowsServers, TestPluginInstancesDifferential).
//
// The table rule's exception: commands older servers apply
// (NodeCSIUpdate, node status and registration, PlanApply,
// AllocClientUpdate, GC, the job commands) write csi_plugin_instances and
// csi_plugin_allocs, but only while the gate holds, when no older server
// is in the servers table. A server below the gate joining afterwards
// would not lose a timestamp, as below claimStateSince, but every plugin
// instance and allocation (a snapshot's rows of tables it does not know
// are skipped), and would then derive controller_required, schedulable
// and the counts from what is left: different decisions, such as a claim
// made ready without its ControllerPublish on it alone. So once any
// in-apply gate holds (ApplyGatesRefusing, apply_gates.go) the leader
// refuses such a server's Join before adding it to raft, and its record
// (host/server ErrServerBelowGate). A server downgraded in place below
// 0.1.0-dev.4 after the gate turned on is beyond that check (it is a
// voter already and restores its own snapshot): a downgrade needs the
// whole cluster restored from a snapshot taken before the upgrade. The
// leader says so at Error, once a minute per server, when such a member's
// Join is refused (host/server join_gate_member.go), and the refused
// server logs the gates at Error and backs off its Joins.
//
// # Volumes, claims and attachments
//
// Tables (state_schema.go): volumes by ID, indexed by plugin and by
// external (plugin, external ID: one provider volume, one volume ID); claims by
// claim ID (set by the proposer: an operator claim has no alloc), indexed
// by volume, by node (node, volume), by alloc (alloc, volume; unique: an
// alloc holds one claim per volume) and by state, so the reaper lists the
// releasing claims without a scan (only releasing and node-detached claims
// are in that index: a reservation writes one tree fewer; ClaimsByState
// scans for an earlier state); attachments by (volume, node), indexed
// by node and by state (the attach reconciler's attaching and detaching
// ones).
//
// DESIGN's claim states are pb.ClaimState (reserved, ready, in-use,
// releasing, node-detached; FREED is the removal) and its attachment
// states pb.AttachmentState (attaching, attached, detaching; DETACHED is
// the removal). The enums are numbered in their order: a move is allowed
// only forward (ErrClaimTransition, ErrAttachmentTransition otherwise), a
// move to the current state changes nothing, or records a failed try whose
// attempts number is above the stored one, so a command proposed twice
// changes nothing the second time. Who moves what:
//
//   - PlanApply reserves the claims of its placements (plan.claims, each
//     carrying its group volume request, so nothing of the claim's life
//     reads the job a purge may remove), and
//     OperatorClaim an operator's, checking each with rules.CheckClaim against
//     every claim the volume holds, those written earlier in the raft batch
//     included (index reads through the batch's transaction), and, in a
//     plan, those of the nodes that took their part before. A plan's node
//     whose claims do not fit refuses its part, naming volume, alloc and
//     node. A claim holds its volume until it is freed, so releasing and
//     node-detached claims count. All of a volume's claims share one access
//     mode (rules.CheckClaim refuses another, no move changes it), so a claim
//     whose mode limits nothing else (multi-node multi-writer or reader
//     only, a read under multi-node single-writer) is checked against the
//     first held claim: a placement on a volume many allocs share costs one
//     read, not one per claim.
//   - The reservation makes the claim ready when its volume's plugin does
//     not require a controller publish (csi_plugins' controller_required)
//     or the node's attachment is attached; otherwise it is reserved and
//     the (volume, node) attachment created attaching. A node whose
//     attachment is detaching takes no new claim of the volume until it is
//     gone. A claim that would add a volume to a node whose instance of
//     the plugin reports max_volumes, and holds claims on that many of the
//     plugin's volumes (the batch's and the command's earlier ones
//     included), is refused (ErrMaxVolumes).
//   - AttachmentUpdate records the attach reconciler's outcomes: attached
//     (with its publish context; the node's reserved claims become ready
//     in the same apply) or an error that keeps the state; detached
//     removes the attachment and frees the node's node-detached claims.
//   - An alloc that becomes terminal (PlanApply's stops, AllocClientUpdate,
//     GC) has its claims moved to releasing in the same apply;
//     OperatorClaimRelease does the same for an operator's claim.
//   - ClaimUpdate carries what only others know: ready (checked), in-use
//     and node-detached reported by the claim's node, node-detached forced
//     by the leader (the node is down past force_detach_after, or gone;
//     refused while it is ready), freed once no attachment is left. A
//     claim that reaches node-detached with no attachment on its node (no
//     controller publish was needed) is freed in that apply. The apply in
//     which a node's last live claim (ClaimLive: before node-detached) of a
//     volume leaves moves the attachment to detaching. A move to in-use
//     with node_expanded_bytes (the node made a pending node expansion
//     after staging or publishing) records that size as the volume's
//     capacity and clears its node_expansion_pending_bytes when covered,
//     in that apply; the leader sets it only once every server knows the
//     rule (nodeExpansionSince, 0.1.0-dev.4), an older server ignores it
//     (testdata/node_expansion.txt). Its answer, a *pb.ClaimUpdateResult
//     (not stored), counts the transitions that moved a claim, which the
//     reaper's metric counts.
//   - NodeFence marks a node fenced (no placements, no operator claims; the
//     fence outlives re-registration); its releasing claims move to
//     node-detached at once (freed where no attachment is left), and its
//     other claims may be moved there.
//   - Every apply that moves a claim to another state, or creates it, sets
//     its state_entered_at to the command's time (a failed try, which moves
//     modified_at, does not), while every server in the servers table has
//     recorded 0.1.0-dev.4 or later (claimStateSince, claim_state_since.go:
//     a gate read from the replicated state, so every server decides alike
//     and an older one keeps the rule off until it is upgraded); otherwise
//     the move clears it and readers (ClaimStateStart, the metrics) fall
//     back to modified_at (testdata/claim_state_since.txt). Unlike the
//     proposers' gates (requireServersAt), which walk raft's configuration
//     and look each member's row up, this one reads the servers table
//     alone, as an apply must (raft's configuration is not part of the
//     replicated state). A stale row (a server that left raft before its
//     row was deleted, or one whose restart has not yet re-recorded its
//     version) keeps the rule off until the row is deleted or re-recorded:
//     a cost to liveness (claims fall back to modified_at meanwhile), never
//     to safety, as every server still decides alike. While the rule
//     holds, the moves to releasing of AllocClientUpdate and GC are timed
//     by the server (received_at, collected_at), not by a client's
//     updated_at; a move with no time (a command from an older proposer)
//     keeps the claim's previous start and modified_at.
//   - VolumeRegister creates or updates a volume (a plugin's volume that
//     another volume ID holds is refused with unique_external (set once
//     every server knows the rule), ErrExternalVolumeTaken, so no
//     two IDs count the claims of one provider volume apart — unless the
//     update keeps the pair the volume is stored with (a pair from before
//     the rule stays usable); a volume with claims
//     keeps its plugin, external ID and claimed capabilities; with
//     if_modify_index only the volume as its proposer read it,
//     ErrVolumeChanged otherwise); VolumeDeregister refuses a volume with
//     claims, and with force removes it and its claims once no claimant
//     can still use it (node-detached, node gone or fenced; an alloc's
//     also stopped on its client or on a down node: releasing, a
//     server-side stop alone, is not enough); with or without force it is
//     refused while an attachment is left (the leader's unpublish undoes
//     it at the provider; dropped with the volume, nothing would).
//   - VolumeDeleting marks a volume its plugin is about to delete, in the
//     apply that checks it holds no claim (ErrVolumeInUse otherwise):
//     from then on rules.CheckClaim, so plans, operator claims and the
//     scheduler, refuse it (ErrVolumeDeleting), and so does
//     VolumeRegister. Volumes.Delete marks, calls the plugin, then
//     deregisters; a definite failure of the plugin clears the mark, an
//     uncertain one keeps it (the data may be gone) until a delete that
//     completes or a deregister. testdata/volume_delete.txt.
//     Provider, schedulable and controller_required mirror the plugin's
//     row, refreshed whenever the row changes.
//   - ACLPolicyUpsert (27) and ACLPolicyDelete (28) store and delete
//     ACL policies by name (rules as written; the servers parse them before
//     proposing). ACLTokenUpsert (29) creates tokens — accessor ID, type
//     client (with policies) or management (without), the SHA-256 of the
//     secret, never the secret — or updates a token's name and policies,
//     keeping its hash, type and times; ACLTokenDelete (30) deletes them.
//     ACLBootstrap (31) stores the first management token and records its
//     raft index; once done it is refused (ErrACLBootstrapped, naming the
//     index) unless the command carries that index as its reset index (the
//     reset procedure of host/server's ACL bootstrap), which works once.
//     They alone write the acl_policies, acl_tokens and acl_bootstrap
//     tables, and are proposed only once every server is at aclSince
//     (0.1.0-dev.4). None is ignorable: an older server stops at one
//     rather than answer with the wrong permissions.
//
// Under the table rule, VolumeRegister (17) to VolumeDeleting (24) are
// proposed only once every server knows them. The older commands that
// touch these tables only update rows that exist (AllocClientUpdate, GC,
// NodeCSIUpdate's mirrors), or carry claims only for volumes the scheduler
// read (PlanApply), which exist only once VolumeRegister has been applied.
//
// Dynamic host volumes (table host_volumes, apply_host_volume.go):
//   - HostVolumeRegister (25) records a volume its node made, one of a
//     name per node (ErrHostVolumeNameTaken), or moves it to deleting,
//     refused while a claim holds it (ErrVolumeInUse); deleting makes
//     rules.CheckClaim refuse claims on it, as VolumeDeleting does. A
//     failed delete's put_back applies only under the deleting mark it
//     undoes (mark_index, ErrHostVolumeMarkChanged), and a deleting mark
//     on a volume deleting must name the mark it takes over; a move to
//     ready with must_exist (a create's answer, a node's report at
//     registration) is refused for a volume forgotten meanwhile
//     (ErrVolumeNotFound), so a finished delete never comes back; one
//     carrying mark_index (a registration's promotion of a pending volume)
//     only while it is pending at that index (ErrHostVolumeNotPending), so
//     the create's answer it raced is kept (these rules came before the
//     host volume gate's version was released).
//   - HostVolumeDelete (26) forgets it once its node removed it; refused
//     while claimed.
//
// Claims on them are rows of the claims table (request type "host"):
// checkReservation reads the volume from host_volumes
// (rules.HostVolumeClaimView), the same access-mode rules apply, and with
// no plugin row or attachment they are ready at once. Nothing on the node
// is to be undone, so the apply that makes the alloc stopped on its client
// (AllocClientUpdate), or gone (GC), frees the claim; a server-side stop
// alone moves it to releasing, where it holds the volume until then (or
// until the reaper forces it for a down node). Both commands are proposed
// only once every server is at hostVolumesSince (0.1.0-dev.4); the claims
// exist only for volumes those commands stored, so no older server
// applies the freeing rule. testdata/host_volumes.txt.
// # Node identity
//
// A node's secret (256 random bits, made by its client; a client that
// presents none, an older one, gets none) is admitted at the node's first
// registration once every server knows node identities (gate
// nodeSecretsSince, 0.1.0-dev.4, host/server/endpoints/node_identity.go);
// the node table keeps only its SHA-256 (Node.secret_hash). NodeRegister
// carrying a hash is refused (ErrNodeSecretMismatch) when the stored node
// has a different one, so two first registrations of one node ID cannot
// both set a secret, and so is one whose checked_secret_hash (the hash
// its proposer checked it against) is no longer the stored one; one
// without a hash keeps the stored hash (never clears it).
// Every other node command clones the stored node and keeps the hash.
// NodeReadmit (32) clears it (`berth node readmit`), so the next
// registration sets a new secret; proposed only past the same gate.
// NodeReadmit also sets Node.readmitted (on a node with or without a
// hash; a node already readmitted without one is not written), and
// NodeRegister keeps readmitted from the stored node (never from the
// command) while the node has no hash and clears it when the
// registration stores one; has_secret is never stored (endpoints set it
// in answers). testdata/node_identity.txt.
//
// Enforcement is each server's own setting (node_identity_enforcement,
// host/server/endpoints/node_enforcement.go), applied where a call is
// served, never in an apply. "warn" admits, logs and counts every call
// for a node without a hash. "strict", once every server is at
// nodeSecretsSince (before that no node can have a hash, so it acts as
// warn), refuses (ErrNodeUnauthenticated) a node call or registration
// for a node whose row exists without a hash, and a registration
// presenting no secret, except:
//   - a registration presenting a well-formed secret for a node ID with
//     no row (a brand-new node) is admitted and adopts the secret;
//   - for a node whose row has readmitted set, a registration presenting
//     a secret adopts it (and clears readmitted, so exactly one
//     registration adopts per readmit: the next with another secret is
//     refused as any node's with a hash), and its heartbeat is admitted
//     to answer register_again; its other node calls are refused.
//
// Two adopting registrations racing for one node are settled by the
// apply (ErrNodeSecretMismatch for the second).
//
// # Snapshots
//
// A snapshot is a versioned header, one record per row naming its table, an
// index record per table and an end record counting the records (see
// SnapshotVersion). Derived tables (node_usage) are not in it: Restore
// rebuilds them from the rows it read. Restore builds a new store and swaps it in only when
// the stream was complete and valid, so a refused snapshot leaves the
// state untouched; the replaced store's AbandonCh closes, which moves
// blocking queries to the new one.
//
// The table rule. Tables are added without a new snapshot version: Restore
// skips, and logs, the rows and index record of a table it does not know.
// That is safe only if the skipped rows are rows this server could never
// have written itself: rows only commands it fails as unknown write. Three
// rules keep that true, and every new table and command must follow them:
//
//   - Table names, like command numbers, are never reused: a name means one
//     table holding one message type, for good.
//   - A new table is written only by new commands, never by a command an
//     older server already applies (that server would apply it without the
//     table's rows and diverge).
//   - A command that writes a new table is not proposed until every server
//     runs a version that knows it, and none older joins after. The
//     proposer checks: each server records its berth version in the
//     servers table (ServerMember.version, re-recorded when it starts),
//     and the proposer compares the version of every server in raft's
//     configuration with the one that introduced the command, refusing
//     with FailedPrecondition while any is older or not yet recorded.
//
// A snapshot from a newer cluster restored by older servers (an operator's
// downgrade) loses the tables they do not know; the log line names them.
// Everything else in a snapshot is strict and refused as ErrSnapshotCorrupt.
//
// # Adding a table and a command
//
// A sketch, with claims as the example: keyed by volume and alloc, listed
// by node. (The real claims table, in state_schema.go, is keyed by claim
// ID; the sketch keeps the steps short.)
//
// Messages, in rpc/proto/berth/v1/, then make proto: the object (message
// Claim { string volume_id = 1; string alloc_id = 2; string node_id = 3;
// ... uint64 create_index; uint64 modify_index; }) and the command
// (message ClaimReserveCommand { Claim claim = 1; }).
//
// Command number: the next free MessageType in command.go, with
// IgnoreUnknownFlag only if an older server may safely skip the command.
// Keep the table rule above.
//
// Table, in state_schema.go, named by a TableClaims constant and added to
// productionSchema's list:
//
//	claimsTable  = newTable(TableClaims, (*pb.Claim).GetVolumeId, (*pb.Claim).GetAllocId)
//	claimsByNode = claimsTable.index("node", (*pb.Claim).GetNodeId, (*pb.Claim).GetVolumeId)
//
// claimsTable.list(r, ws, volume) lists a volume's claims (a prefix of the
// primary key), claimsByNode.list(r, ws, node, volume) a node's claims on a
// volume, of which there may be several. uniqueIndex declares a key no two
// rows may share; insert and Restore enforce it.
//
// Reads, in state_claims.go, for everyone else:
//
//	func (r reader) ClaimsByNode(ws memdb.WatchSet, node string) ([]*pb.Claim, error) {
//		return claimsByNode.list(r, ws, node)
//	}
//
// Apply function, in apply_claim.go: validate; read what the command
// depends on through tx (it sees the claims written earlier in the batch);
// refuse with a sentinel from errors.go naming volume, alloc and node,
// before writing; then set the create and modify indexes from tx.index and
// claimsTable.insert(tx, claim). Register it in command.go's commands table:
//
//	ClaimReserve: newCommand("ClaimReserve", applyClaimReserve),
//
// Tests: a script in testdata/ (the command in script_test.go's harness),
// the command in everyCommand (command_test.go) for FuzzDecode, and a batch
// test like TestBatchIndexReadRefusesSecondWriter for every refusal that
// reads an index. Snapshots, restore and blocking queries pick the table up
// from the schema.
package fsm
