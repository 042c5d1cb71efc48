package fsm

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// The servers' CSI plugin table (csi_plugins): one row per plugin ID,
// derived from two sources kept in step by the applies that change them:
//
//   - the nodes' fingerprints: a node's csi_controller_plugins and
//     csi_node_plugins, replaced whole by NodeCSIUpdate, are the row's
//     controllers and nodes by node ID. A node that goes down keeps its
//     instances in the rows, marked unhealthy ("node is down"), as Nomad
//     keeps them: its plugins come back with it (NodeStatusUpdate or
//     NodeRegister to ready restores them from the node's last report).
//     A deregistered node's instances are removed.
//   - the allocs that run the plugin: an alloc whose group has a task with
//     a csi_plugin block, that is not terminal (rules.AllocTerminal) and whose
//     job is stored and not stopped, is one of the row's allocations. The
//     expected counts are those allocs by type (monolith counts for both)
//     plus the instances that no alloc runs (storage adapters), so an
//     adapter reads 1/1 and a plugin job whose task has not fingerprinted
//     yet reads 0/1. PlanApply, AllocClientUpdate, GC, and the job
//     commands (register, stop, revert, purge) keep them right.
//
// The table rule (doc.go): only NodeCSIUpdate, proposed once every server
// knows the table, creates rows. Every other command only updates rows
// that exist, so an older server, which has no rows, applies it the same.
// A row created by NodeCSIUpdate starts with the allocations of the jobs
// whose current version runs the plugin, so nothing placed earlier is
// missed. A row left with no instances and no allocations is deleted.
//
// Rows are rewritten only when something in them changed, so heartbeats
// of an unchanged plugin set do not wake the table's blocking queries.
//
// Where a row's instances and allocations are kept (in the row, or, once
// every server is at pluginInstancesSince, in csi_plugin_instances and
// csi_plugin_allocs) is csi_instances.go's: the applies here record the
// instances and allocations they set (csiChanges.instance, setAlloc) and
// flush writes them in the form the gate decides.

// applyNodeCSIUpdate replaces a node's CSI plugin set and updates the
// rows of every plugin it had or has. The node must be registered
// (ErrNodeNotFound). Each instance is filed under its plugin ID: an empty
// key, or an instance naming another plugin, is refused
// (ErrInvalidCommand); an instance without plugin_id takes its key.
func applyNodeCSIUpdate(tx *writeTxn, cmd *pb.NodeCSIUpdateCommand) error {
	id := cmd.GetNodeId()
	if id == "" {
		return fmt.Errorf("%w: no node ID", ErrInvalidCommand)
	}
	for _, set := range []struct {
		kind string
		m    map[string]*pb.CSIPluginInfo
	}{{"controller", cmd.GetControllers()}, {"node", cmd.GetNodes()}} {
		for _, key := range slices.Sorted(maps.Keys(set.m)) {
			info := set.m[key]
			switch {
			case key == "":
				return fmt.Errorf("%w: node %q: a %s plugin without an ID", ErrInvalidCommand, id, set.kind)
			case info == nil:
				return fmt.Errorf("%w: node %q: %s plugin %q has no instance", ErrInvalidCommand, id, set.kind, key)
			case info.GetPluginId() != "" && info.GetPluginId() != key:
				return fmt.Errorf("%w: node %q: %s plugin %q is filed under %q", ErrInvalidCommand, id, set.kind, info.GetPluginId(), key)
			}
			info.PluginId = key
		}
	}
	existing, err := nodesTable.first(tx, nil, id)
	if err != nil {
		return err
	}
	if existing == nil {
		return fmt.Errorf("CSI plugins of node %q: %w", id, ErrNodeNotFound)
	}
	n := proto.Clone(existing).(*pb.Node)
	n.CsiControllerPlugins = cmd.GetControllers()
	n.CsiNodePlugins = cmd.GetNodes()
	if !proto.Equal(n, existing) {
		n.ModifyIndex = tx.index
		if err := nodesTable.insert(tx, n); err != nil {
			return err
		}
	}
	c := newCSIChanges()
	c.at = cmd.GetUpdatedAt()
	c.fromServing = cmd.GetDeriveFromServing()
	if err := c.node(tx, existing, n, true); err != nil {
		return err
	}
	return c.flush(tx)
}

// csiChanges collects the plugin rows one apply changes: each is cloned
// when first touched, changed in place, and written (or deleted) once by
// flush, in plugin ID order.
type csiChanges struct {
	rows   map[string]*pb.CSIPlugin
	stored map[string]*pb.CSIPlugin
	// anyRows caches whether the table holds a row at all: every command
	// on allocs asks, and with no plugins it is the only read.
	anyRows *bool
	tasks   map[jobVersion][]csiTask
	// at stamps the claims and attachments flush changes when a row stops
	// requiring a controller publish (skipControllerPublish).
	at int64
	// fromServing marks every row flushed derived_from_serving (a
	// NodeCSIUpdate with derive_from_serving).
	fromServing bool
	// instances holds, by plugin, the instances the apply sets (nil:
	// removes); flush writes them into the row or csi_plugin_instances.
	instances map[string]map[instanceKey]*pb.CSIPluginInfo
	// allocs holds, by plugin and alloc ID, the allocations the apply
	// files (nil: removes); flush writes them into the row or
	// csi_plugin_allocs.
	allocs map[string]map[string]*pb.CSIPluginAlloc
}

// instance records the instance of plugin id at k the apply leaves (nil:
// none).
func (c *csiChanges) instance(id string, k instanceKey, info *pb.CSIPluginInfo) {
	if c.instances[id] == nil {
		c.instances[id] = map[instanceKey]*pb.CSIPluginInfo{}
	}
	c.instances[id][k] = info
}

type jobVersion struct {
	job     string
	version uint64
	group   string
}

// csiTask is one plugin run by an alloc's group, its type merged over the
// group's tasks (a controller task and a node task of one plugin in one
// group make a monolith).
type csiTask struct {
	plugin string
	typ    pb.CSIPluginType
}

func newCSIChanges() *csiChanges {
	return &csiChanges{
		rows: map[string]*pb.CSIPlugin{}, stored: map[string]*pb.CSIPlugin{}, tasks: map[jobVersion][]csiTask{},
		instances: map[string]map[instanceKey]*pb.CSIPluginInfo{}, allocs: map[string]map[string]*pb.CSIPluginAlloc{},
	}
}

// row returns the plugin's row to change, nil when it is not stored and
// create is false.
func (c *csiChanges) row(tx *writeTxn, id string, create bool) (*pb.CSIPlugin, error) {
	if r, ok := c.rows[id]; ok {
		return r, nil
	}
	stored, err := csiPluginsTable.first(tx, nil, id)
	if err != nil {
		return nil, err
	}
	var r *pb.CSIPlugin
	switch {
	case stored != nil:
		r = proto.Clone(stored).(*pb.CSIPlugin)
	case !create:
		return nil, nil
	default:
		r = &pb.CSIPlugin{Id: id}
	}
	c.rows[id] = r
	c.stored[id] = stored
	t := true
	c.anyRows = &t
	if stored == nil {
		if err := c.seedAllocs(tx, r); err != nil {
			return nil, err
		}
		if r.ControllerRequired, err = volumesRequireController(tx, id); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// volumesRequireController reports whether a volume of the plugin keeps
// controller_required from an earlier row of the plugin: a row deleted
// (every instance and alloc gone) and created again starts requiring the
// controller publish its volumes were registered with, so a node instance
// that reports first cannot make their claims skip it. A new row is rare
// (the plugin's first report after it was gone): the scan stops at the
// first volume that requires it.
func volumesRequireController(tx *writeTxn, pluginID string) (bool, error) {
	required := false
	err := volumesByPlugin.each(tx.readTxn(), nil, []string{pluginID}, func(v *pb.Volume) error {
		if v.GetControllerRequired() {
			required = true
			return errStopScan
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return false, err
	}
	return required, nil
}

// seedAllocs fills a new row's allocations from the allocs of every job
// whose current version runs the plugin.
func (c *csiChanges) seedAllocs(tx *writeTxn, r *pb.CSIPlugin) error {
	jobs, err := jobsTable.list(tx, nil)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if !slices.ContainsFunc(jobCSITasks(j, ""), func(t csiTask) bool { return t.plugin == r.GetId() }) {
			continue
		}
		allocs, err := allocsByJob.list(tx, nil, j.GetId())
		if err != nil {
			return err
		}
		for _, a := range allocs {
			if err := c.alloc(tx, a, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// hasRows reports whether the table holds any row.
func (c *csiChanges) hasRows(tx *writeTxn) (bool, error) {
	if c.anyRows == nil {
		r, err := csiPluginsTable.primary.first(tx, nil)
		if err != nil {
			return false, err
		}
		has := r != nil || len(c.rows) > 0
		c.anyRows = &has
	}
	return *c.anyRows, nil
}

// node moves the node's instances in the rows from what old (nil: not
// registered) had to what n (nil: deregistered) has. Only NodeCSIUpdate
// passes create.
func (c *csiChanges) node(tx *writeTxn, old, n *pb.Node, create bool) error {
	ids := map[string]bool{}
	for _, nd := range []*pb.Node{old, n} {
		for id := range nd.GetCsiControllerPlugins() {
			ids[id] = true
		}
		for id := range nd.GetCsiNodePlugins() {
			ids[id] = true
		}
	}
	nodeID := old.GetId()
	if n != nil {
		nodeID = n.GetId()
	}
	down := n.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		_, has := n.GetCsiControllerPlugins()[id]
		_, hasNode := n.GetCsiNodePlugins()[id]
		r, err := c.row(tx, id, create && (has || hasNode))
		if err != nil {
			return err
		}
		if r == nil {
			continue
		}
		for _, set := range []struct {
			controller bool
			info       *pb.CSIPluginInfo
		}{{true, n.GetCsiControllerPlugins()[id]}, {false, n.GetCsiNodePlugins()[id]}} {
			info := set.info
			if info != nil && down {
				info = proto.Clone(info).(*pb.CSIPluginInfo)
				info.Healthy = false
				info.HealthDescription = fmt.Sprintf("node %q is down", nodeID)
			}
			c.instance(id, instanceKey{set.controller, nodeID}, info)
		}
	}
	return nil
}

// nodeChanged updates the rows for a node written by a command other than
// NodeCSIUpdate (status, registration, deregistration): only when the
// node has plugins, so nodes without any never read the table.
func nodeChanged(tx *writeTxn, old, n *pb.Node) error {
	if len(old.GetCsiControllerPlugins())+len(old.GetCsiNodePlugins())+len(n.GetCsiControllerPlugins())+len(n.GetCsiNodePlugins()) == 0 {
		return nil
	}
	c := newCSIChanges()
	c.at = max(old.GetStatusUpdatedAt(), n.GetStatusUpdatedAt())
	if err := c.node(tx, old, n, false); err != nil {
		return err
	}
	return c.flush(tx)
}

// alloc files the alloc (as stored now; gone when it was removed) in the
// rows of the plugins its group runs: one of their allocations while it
// runs the plugin, none otherwise.
func (c *csiChanges) alloc(tx *writeTxn, a *pb.Allocation, gone bool) error {
	if ok, err := c.hasRows(tx); err != nil || !ok {
		return err
	}
	tasks, err := c.allocTasks(tx, a)
	if err != nil || len(tasks) == 0 {
		return err
	}
	counts := !gone && !rules.AllocTerminal(a)
	if counts {
		job, err := jobsTable.first(tx, nil, a.GetJobId())
		if err != nil {
			return err
		}
		counts = job != nil && !job.GetStop()
	}
	for _, t := range tasks {
		r, err := c.row(tx, t.plugin, false)
		if err != nil {
			return err
		}
		if r == nil {
			continue
		}
		var pa *pb.CSIPluginAlloc
		if counts {
			pa = &pb.CSIPluginAlloc{AllocId: a.GetId(), NodeId: a.GetNodeId(), JobId: a.GetJobId(), Type: t.typ}
		}
		c.setAlloc(t.plugin, a.GetId(), pa)
	}
	return nil
}

// allocTasks returns the plugins the alloc's group runs, from the job
// version it runs (none when that version is not stored: a purged job's
// allocs leave the rows with the purge). Cached per version and group:
// a plan's allocs mostly share both.
func (c *csiChanges) allocTasks(tx *writeTxn, a *pb.Allocation) ([]csiTask, error) {
	key := jobVersion{a.GetJobId(), a.GetJobVersion(), a.GetTaskGroup()}
	if tasks, ok := c.tasks[key]; ok {
		return tasks, nil
	}
	j, err := jobVersionsTable.first(tx, nil, key.job, versionKey(key.version))
	if err != nil {
		return nil, err
	}
	tasks := jobCSITasks(j, key.group)
	c.tasks[key] = tasks
	return tasks, nil
}

// jobCSITasks returns the plugins the job's group (every group when group
// is "") runs, sorted by plugin ID.
func jobCSITasks(j *pb.Job, group string) []csiTask {
	var out []csiTask
	for _, g := range j.GetGroups() {
		if group != "" && g.GetName() != group {
			continue
		}
		for _, t := range g.GetTasks() {
			p := t.GetCsiPlugin()
			if p.GetId() == "" {
				continue
			}
			typ := csiPluginTypeOf(p.GetType())
			if i := slices.IndexFunc(out, func(x csiTask) bool { return x.plugin == p.GetId() }); i >= 0 {
				if out[i].typ != typ {
					out[i].typ = pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH
				}
				continue
			}
			out = append(out, csiTask{plugin: p.GetId(), typ: typ})
		}
	}
	slices.SortFunc(out, func(a, b csiTask) int {
		if a.plugin < b.plugin {
			return -1
		}
		if a.plugin > b.plugin {
			return 1
		}
		return 0
	})
	return out
}

// csiPluginTypeOf reads a csi_plugin block's type word; a word this
// version does not know counts as monolith, so its alloc is expected on
// both sides rather than on neither.
func csiPluginTypeOf(word string) pb.CSIPluginType {
	switch word {
	case "controller":
		return pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER
	case "node":
		return pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE
	}
	return pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH
}

// csiAllocsChanged refiles allocs the command wrote or removed, given as
// they were before it (or as placed): the one call PlanApply,
// AllocClientUpdate and GC make. Each leaves the rows of the version it
// ran, then joins those of the version it runs now, if still stored. With
// no row in the table this is one read.
func csiAllocsChanged(tx *writeTxn, before []*pb.Allocation) error {
	if len(before) == 0 {
		return nil
	}
	c := newCSIChanges()
	if ok, err := c.hasRows(tx); err != nil || !ok {
		return err
	}
	for _, a := range before {
		if err := c.alloc(tx, a, true); err != nil {
			return err
		}
		cur, err := allocsTable.first(tx, nil, a.GetId())
		if err != nil {
			return err
		}
		if cur != nil {
			if err := c.alloc(tx, cur, false); err != nil {
				return err
			}
		}
	}
	return c.flush(tx)
}

// csiJobChanged refiles the job's allocs after a new version (register,
// stop, revert) when it or the previous one runs a plugin. For a purge
// (j nil) the job's allocs leave every row.
func csiJobChanged(tx *writeTxn, prev, j *pb.Job) error {
	if j != nil && len(jobCSITasks(prev, "")) == 0 && len(jobCSITasks(j, "")) == 0 {
		return nil
	}
	c := newCSIChanges()
	if ok, err := c.hasRows(tx); err != nil || !ok {
		return err
	}
	if j == nil {
		// Purged: the allocs may run any of the versions just deleted, so
		// every row is checked (the table is small: one row a plugin), and
		// the split rows' allocations of the job (csiAllocsByJob).
		split, err := jobPlugins(tx, prev.GetId())
		if err != nil {
			return err
		}
		rows, err := csiPluginsTable.list(tx, nil)
		if err != nil {
			return err
		}
		for _, stored := range rows {
			if !split[stored.GetId()] && !slices.ContainsFunc(stored.GetAllocations(), func(x *pb.CSIPluginAlloc) bool { return x.GetJobId() == prev.GetId() }) {
				continue
			}
			r, err := c.row(tx, stored.GetId(), false)
			if err != nil {
				return err
			}
			if err := c.dropJob(tx, r, prev.GetId()); err != nil {
				return err
			}
		}
		return c.flush(tx)
	}
	allocs, err := allocsByJob.list(tx, nil, j.GetId())
	if err != nil {
		return err
	}
	// The allocs of the previous version's plugins leave those rows first,
	// in case the new version runs other plugins.
	for _, t := range jobCSITasks(prev, "") {
		r, err := c.row(tx, t.plugin, false)
		if err != nil {
			return err
		}
		if r != nil {
			if err := c.dropJob(tx, r, j.GetId()); err != nil {
				return err
			}
		}
	}
	for _, a := range allocs {
		if err := c.alloc(tx, a, false); err != nil {
			return err
		}
	}
	return c.flush(tx)
}

// flush derives each changed row's counts and writes it, deletes it when
// nothing is left, and leaves it alone when nothing changed.
func (c *csiChanges) flush(tx *writeTxn) error {
	split, err := pluginInstancesOn(tx)
	if err != nil {
		return err
	}
	for _, id := range slices.Sorted(maps.Keys(c.rows)) {
		r, stored := c.rows[id], c.stored[id]
		// What the row required before this apply: the stored row's, or a
		// new row's seed from its volumes (row) — a row created again and
		// turned false at once turns too.
		required := r.GetControllerRequired()
		if c.fromServing {
			r.DerivedFromServing = true
		}
		// A row changing form is read first: if the apply changes nothing
		// a read shows, it is rewritten without a new modify index
		// (csiReform).
		var before *pb.CSIPlugin
		if stored != nil && split == inline(stored) {
			if before, err = withInstances(tx, nil, stored); err != nil {
				return err
			}
		}
		changed, left := false, false
		if split {
			if changed, err = applySplit(tx, r, stored, c.instances[id], c.allocs[id]); err != nil {
				return err
			}
			if left, err = splitLeft(tx, id); err != nil {
				return err
			}
		} else {
			if !inline(r) {
				if err := joinInstances(tx, r); err != nil {
					return err
				}
			}
			applyInline(r, c.instances[id])
			applyAllocsInline(r, c.allocs[id])
			deriveCSIPlugin(r)
			left = inline(r)
		}
		if !left {
			if stored != nil {
				if err := csiPluginsTable.delete(tx, stored); err != nil {
					return err
				}
				if err := volumesPluginChanged(tx, id, nil); err != nil {
					return err
				}
			}
			continue
		}
		if stored != nil && !changed && proto.Equal(r, stored) {
			continue
		}
		if before != nil && !changed {
			quiet, err := csiReform(tx, r, before)
			if err != nil {
				return err
			}
			if quiet {
				continue
			}
		}
		r.CreateIndex = tx.index
		if stored != nil {
			r.CreateIndex = stored.GetCreateIndex()
		}
		r.ModifyIndex = tx.index
		if err := csiPluginsTable.insert(tx, r); err != nil {
			return err
		}
		if err := volumesPluginChanged(tx, id, r); err != nil {
			return err
		}
		if required && !r.GetControllerRequired() {
			if err := skipControllerPublish(tx, id, c.at); err != nil {
				return err
			}
		}
	}
	return nil
}

// skipControllerPublish is what a plugin whose controllers no longer
// publish (controller_required turned false: the instances serving now
// say so, as when a task-launched plugin replaced a storage adapter of
// the same ID) does to the publishes still waiting: each attaching
// attachment of the plugin is removed and the reserved claims it held
// back become ready, in this apply, so no claim waits for a
// ControllerPublishVolume nothing serving can make. Attached and
// detaching attachments stay: their publish happened, and the attach
// reconciler unpublishes it through a controller that can, or, when none
// of the plugin's controllers can, removes the attachment without a call
// (host/server/volumeloops/attach.go). The reverse turn needs nothing here: claims made ready
// without a publish keep their node, and the next claim on a node
// without an attachment creates one.
func skipControllerPublish(tx *writeTxn, pluginID string, at int64) error {
	atts, err := attachmentsByState.list(tx, nil, strconv.Itoa(int(pb.AttachmentState_ATTACHMENT_STATE_ATTACHING)))
	if err != nil {
		return err
	}
	for _, a := range atts {
		if a.GetPluginId() != pluginID {
			continue
		}
		when := at
		if when == 0 {
			when = a.GetModifiedAt()
		}
		if err := attachmentsTable.delete(tx, a); err != nil {
			return err
		}
		if err := readyReservedClaims(tx, a.GetVolumeId(), a.GetNodeId(), when); err != nil {
			return err
		}
	}
	return nil
}

// deriveLegacy is the rule of a row not derived_from_serving, as servers
// before that rule apply it (a rolling upgrade, an old log replayed):
// controller_required once any instance, of either side, said so and from
// then on while the row lives; provider and version of the first healthy
// instance, kept when none is healthy.
func deriveLegacy(r *pb.CSIPlugin, healthy *pb.CSIPluginInfo) {
	for _, set := range []map[string]*pb.CSIPluginInfo{r.GetControllers(), r.GetNodes()} {
		for _, info := range set {
			if info.GetControllerRequired() {
				r.ControllerRequired = true
			}
		}
	}
	if healthy != nil {
		r.Provider, r.Version = healthy.GetProvider(), healthy.GetProviderVersion()
	}
}

// deriveCSIPlugin sets what a row derives from its instances and
// allocations, from what serves now and nothing earlier: counts; provider
// and version of the first healthy instance (controllers first, by node
// ID), else of the first instance, else none; controller_required when a
// controller instance says so; each allocation's health (its instance on
// its node is healthy) and schedulable.
//
// controller_required is the controllers' word: only a controller
// service can say whether it publishes (a node-only deployment of a
// driver advertises the controller service and answers no capabilities).
// With no controller instance that has a word (none, or none
// fingerprinted yet) nothing serving can say, and the row keeps what its
// last controllers said (a new row: what its volumes were registered
// with, volumesRequireController): in a split deployment
// whose controllers are gone for a moment (a job update, a deregistered
// node) the node instances alone must not make claims skip the publish.
func deriveCSIPlugin(r *pb.CSIPlugin) {
	slices.SortFunc(r.Allocations, func(a, b *pb.CSIPluginAlloc) int {
		switch {
		case a.GetAllocId() < b.GetAllocId():
			return -1
		case a.GetAllocId() > b.GetAllocId():
			return 1
		}
		return 0
	})
	r.ControllersHealthy, r.NodesHealthy, r.ControllersExpected, r.NodesExpected = 0, 0, 0, 0
	// controller_required is the word of the controllers that have one: a
	// controller instance never fingerprinted (its plugin failed its first
	// Probe, or it answers ControllerGetCapabilities Unimplemented) reports
	// no controller_info and does not know whether it publishes.
	spoke, required := false, false
	var first, healthy *pb.CSIPluginInfo
	for _, set := range []struct {
		instances  map[string]*pb.CSIPluginInfo
		healthy    *int32
		expected   *int32
		controller bool
	}{{r.GetControllers(), &r.ControllersHealthy, &r.ControllersExpected, true}, {r.GetNodes(), &r.NodesHealthy, &r.NodesExpected, false}} {
		for _, nodeID := range slices.Sorted(maps.Keys(set.instances)) {
			info := set.instances[nodeID]
			if info.GetProvider() != "" {
				if first == nil {
					first = info
				}
				if healthy == nil && info.GetHealthy() {
					healthy = info
				}
			}
			if info.GetHealthy() {
				*set.healthy++
			}
			if info.GetAllocId() == "" {
				*set.expected++
			}
			if set.controller && (info.GetControllerInfo() != nil || info.GetControllerRequired()) {
				spoke = true
				required = required || info.GetControllerRequired()
			}
		}
	}
	switch {
	case !r.GetDerivedFromServing():
		deriveLegacy(r, healthy)
	default:
		if spoke {
			r.ControllerRequired = required
		}
		if healthy != nil {
			first = healthy
		}
		r.Provider, r.Version = first.GetProvider(), first.GetProviderVersion()
	}
	for _, a := range r.GetAllocations() {
		ctl := a.GetType() != pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE
		node := a.GetType() != pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER
		if ctl {
			r.ControllersExpected++
		}
		if node {
			r.NodesExpected++
		}
		healthy := false
		for _, inst := range []*pb.CSIPluginInfo{r.GetControllers()[a.GetNodeId()], r.GetNodes()[a.GetNodeId()]} {
			if inst.GetAllocId() == a.GetAllocId() && inst.GetHealthy() {
				healthy = true
			}
		}
		a.Healthy = healthy
	}
	r.Schedulable = r.NodesHealthy > 0 && (!r.ControllerRequired || r.ControllersHealthy > 0)
}
