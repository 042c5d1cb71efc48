package jobspec

import (
	"fmt"
	pathpkg "path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"berth.dev/berth/internal/durations"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/internal/versions"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// Constraint operators. "==" is accepted as OpEqual and stored as it.
const (
	OpEqual         = "="
	OpNotEqual      = "!="
	OpRegexp        = "regexp"
	OpVersion       = "version"
	OpIsSet         = "is_set"
	OpIsNotSet      = "is_not_set"
	OpDistinctHosts = "distinct_hosts"
)

var operators = []string{OpEqual, "==", OpNotEqual, OpRegexp, OpVersion, OpIsSet, OpIsNotSet, OpDistinctHosts}

// maxNameLen bounds job IDs and group, task and volume names, which end up
// in alloc names, directory names and API paths.
const maxNameLen = 128

// ValidateJob checks a job the way Parse does, without positions: the
// server calls it (after Canonicalize) on every job it is asked to
// register, since one sent as JSON through the API was never parsed. The
// error is *Errors, each entry naming its field path, such as
// `group "api" task "web": resources.cpu`.
func ValidateJob(job *pb.Job) error {
	v := &validator{errs: &Errors{}}
	v.job(job)
	return v.errs.err()
}

// validator checks a decoded job. pos says where each field was written
// (nil for a job from the API); skip holds the paths the parser reported
// already.
type validator struct {
	errs *Errors
	pos  positions
	skip map[string]bool
}

func (v *validator) add(p path, format string, args ...any) {
	v.addKind(p, ErrInvalidJob, format, args...)
}

func (v *validator) addKind(p path, kind error, format string, args ...any) {
	// A field the parser reported, or one inside it (a config key when the
	// config block was misspelt), has been complained about already.
	for q, ok := p, len(p.field) > 0; ok && len(q.field) > 0; q, ok = q.parent() {
		if v.skip[q.String()] {
			return
		}
	}
	v.errs.add(v.pos.of(p), p.String(), kind, format, args...)
}

func (v *validator) job(job *pb.Job) {
	if job == nil {
		v.add(path{}, "no job")
		return
	}
	p := path{}
	v.name(p.f("id"), "job ID", job.GetId())
	if strings.ContainsFunc(job.GetName(), isControl) {
		v.add(p.f("name"), "must not contain control characters, got %q", job.GetName())
	}
	if _, ok := pb.JobType_name[int32(job.GetType())]; !ok || job.GetType() == pb.JobType_JOB_TYPE_UNSPECIFIED {
		v.add(p.f("type"), `must be "service", "batch" or "system"`)
	}
	if pr := job.GetPriority(); pr < 1 || pr > 100 {
		v.add(p.f("priority"), "must be between 1 and 100, got %d", pr)
	}
	v.meta(p.f("meta"), job.GetMeta())
	for i, c := range job.GetConstraints() {
		v.constraint(p.at("constraint", i), c, false)
	}
	v.update(p.f("update"), job.GetUpdate())
	if len(job.GetGroups()) == 0 {
		v.add(p.f("group"), "a job needs at least one group")
	}
	seen := map[string]bool{}
	for i, g := range job.GetGroups() {
		if g == nil {
			v.add(p.at("groups", i), "empty group")
			continue
		}
		gp := p.in("group", g.GetName())
		if seen[g.GetName()] {
			v.add(gp, "duplicate group name")
			continue
		}
		seen[g.GetName()] = true
		v.group(gp, job, g)
	}
}

func (v *validator) group(p path, job *pb.Job, g *pb.TaskGroup) {
	v.name(p, "group name", g.GetName())
	switch {
	case g.GetCount() < 0:
		v.add(p.f("count"), "must be >= 0, got %d", g.GetCount())
	case job.GetType() == pb.JobType_JOB_TYPE_SYSTEM && g.GetCount() != 1:
		v.add(p.f("count"), "a system job runs one alloc of each group on every node; leave count out (got %d)", g.GetCount())
	}
	v.restart(p.f("restart"), g.GetRestart())
	v.reschedule(p.f("reschedule"), job.GetType(), g.GetReschedule())
	for i, c := range g.GetConstraints() {
		v.constraint(p.at("constraint", i), c, false)
	}
	if g.Update != nil {
		v.update(p.f("update"), g.GetUpdate())
	}
	v.meta(p.f("meta"), g.GetMeta())
	for _, name := range sortedKeys(g.GetVolumes()) {
		v.volume(p.in("volume", name), name, g.GetVolumes()[name])
	}
	v.volumeOverlaps(p, g)

	if len(g.GetTasks()) == 0 {
		v.add(p, "no task: a group needs at least one task")
	}
	seen := map[string]bool{}
	var leaders []string
	for i, t := range g.GetTasks() {
		if t == nil {
			v.add(p.at("tasks", i), "empty task")
			continue
		}
		tp := p.in("task", t.GetName())
		if seen[t.GetName()] {
			v.add(tp, "duplicate task name")
			continue
		}
		seen[t.GetName()] = true
		if t.GetLeader() {
			leaders = append(leaders, t.GetName())
		}
		v.task(tp, job, g, t)
	}
	if len(leaders) > 1 {
		v.add(p.in("task", leaders[1]).f("leader"), "a group has at most one leader task; %q is one already", leaders[0])
	}
	v.groupPlugins(p, g)
}

// groupPlugins refuses two tasks of a group serving one side of one plugin:
// a plugin's controller and node may be two tasks of a group, but each side
// is served by one task of an alloc.
func (v *validator) groupPlugins(p path, g *pb.TaskGroup) {
	type side struct{ id, role string }
	by := map[side]string{}
	for _, t := range g.GetTasks() {
		cp := t.GetCsiPlugin()
		if cp == nil || cp.GetId() == "" {
			continue
		}
		var roles []string
		switch cp.GetType() {
		case "controller", "node":
			roles = []string{cp.GetType()}
		case "monolith":
			roles = []string{"controller", "node"}
		}
		for _, r := range roles {
			k := side{cp.GetId(), r}
			if other, dup := by[k]; dup {
				v.add(p.in("task", t.GetName()).f("csi_plugin").f("type"),
					"task %q already serves plugin %q as %s in this group; one task per plugin side", other, cp.GetId(), r)
				break
			}
			by[k] = t.GetName()
		}
	}
}

func (v *validator) restart(p path, r *pb.RestartPolicy) {
	if r == nil {
		v.add(p, "missing (Canonicalize fills in the default)")
		return
	}
	if r.GetAttempts() < 0 {
		v.add(p.f("attempts"), "must be >= 0, got %d", r.GetAttempts())
	}
	v.durationMs(p.f("interval"), r.GetIntervalMs())
	v.durationMs(p.f("delay"), r.GetDelayMs())
	if _, ok := pb.RestartMode_name[int32(r.GetMode())]; !ok || r.GetMode() == pb.RestartMode_RESTART_MODE_UNSPECIFIED {
		v.add(p.f("mode"), `must be "fail" or "delay"`)
	}
	if n := int64(r.GetAttempts()); n > 0 && r.GetIntervalMs() > 0 && r.GetDelayMs() > 0 && n*r.GetDelayMs() > r.GetIntervalMs() {
		v.add(p, "%d attempts %s apart do not fit in an interval of %s; lengthen interval or shorten delay",
			n, fmtMs(r.GetDelayMs()), fmtMs(r.GetIntervalMs()))
	}
}

func (v *validator) reschedule(p path, t pb.JobType, r *pb.ReschedulePolicy) {
	if t == pb.JobType_JOB_TYPE_SYSTEM {
		if r != nil {
			v.add(p, "system jobs are not rescheduled: their allocs belong to their nodes")
		}
		return
	}
	if r == nil {
		v.add(p, "missing (Canonicalize fills in the default)")
		return
	}
	if r.GetAttempts() < 0 {
		v.add(p.f("attempts"), "must be >= 0, got %d", r.GetAttempts())
	}
	v.durationMs(p.f("interval"), r.GetIntervalMs())
	v.durationMs(p.f("delay"), r.GetDelayMs())
	v.durationMs(p.f("max_delay"), r.GetMaxDelayMs())
	if !r.GetUnlimited() && r.GetAttempts() > 0 && r.GetIntervalMs() == 0 {
		v.add(p.f("interval"), "required when attempts is bounded (unlimited = false)")
	}
	if r.GetMaxDelayMs() > 0 && r.GetMaxDelayMs() < r.GetDelayMs() {
		v.add(p.f("max_delay"), "%s is shorter than delay %s", fmtMs(r.GetMaxDelayMs()), fmtMs(r.GetDelayMs()))
	}
}

func (v *validator) update(p path, u *pb.UpdateStrategy) {
	if u == nil {
		return
	}
	if u.GetMaxParallel() < 0 {
		v.add(p.f("max_parallel"), "must be >= 0, got %d", u.GetMaxParallel())
	}
	v.durationMs(p.f("min_healthy_time"), u.GetMinHealthyMs())
}

func (v *validator) constraint(p path, c *pb.Constraint, inTask bool) {
	if c == nil {
		v.add(p, "empty constraint")
		return
	}
	op := c.GetOperator()
	if !slices.Contains(operators, op) {
		v.add(p.f("operator"), "unknown operator %q%s", op, didYouMean(op, operators))
		return
	}
	if op == OpDistinctHosts {
		if inTask {
			v.add(p.f("operator"), "distinct_hosts places a job's or group's allocs on different nodes; a task cannot ask for it")
		}
		if val := c.GetValue(); val != "" && val != "true" {
			v.add(p.f("value"), `distinct_hosts takes no value but "true", got %q`, val)
		}
		return
	}
	if c.GetAttribute() == "" {
		v.add(p.f("attribute"), "required for operator %q", op)
	}
	switch {
	case op == OpIsSet || op == OpIsNotSet:
	case c.GetValue() == "":
		v.add(p.f("value"), "required for operator %q", op)
	case op == OpRegexp:
		if _, err := regexp.Compile(c.GetValue()); err != nil {
			v.add(p.f("value"), "invalid regexp: %v", err)
		}
	case op == OpVersion:
		if _, err := versions.ParseConstraint(c.GetValue()); err != nil {
			v.add(p.f("value"), "%v", err)
		}
	}
}

// CSI access and attachment modes, as the claim code spells them.
var (
	accessModes = []string{"single-node-reader-only", "single-node-writer", "single-node-single-writer",
		"single-node-multi-writer", "multi-node-reader-only", "multi-node-single-writer", "multi-node-multi-writer"}
	attachmentModes = []string{"file-system", "block-device"}
)

func (v *validator) volume(p path, key string, vol *pb.VolumeRequest) {
	if vol == nil {
		v.add(p, "empty volume")
		return
	}
	v.name(p, "volume name", key)
	if vol.GetName() != key {
		v.add(p.f("name"), "%q differs from the volume's key %q", vol.GetName(), key)
	}
	switch vol.GetType() {
	case "csi":
	case "host":
		v.hostVolume(p, vol)
		return
	default:
		v.add(p.f("type"), `must be "csi" or "host", got %q`, vol.GetType())
	}
	switch {
	case vol.GetSource() == "" && vol.GetPerAlloc():
		v.add(p.f("per_alloc"), "per_alloc appends the alloc index to source, which is empty")
	case vol.GetSource() == "":
		v.add(p.f("source"), "required: the ID of the volume to claim")
	}
	if m := vol.GetAccessMode(); m != "" && !slices.Contains(accessModes, m) {
		v.add(p.f("access_mode"), "unknown access mode %q%s", m, didYouMean(m, accessModes))
	}
	if m := vol.GetAttachmentMode(); m != "" && !slices.Contains(attachmentModes, m) {
		v.add(p.f("attachment_mode"), "unknown attachment mode %q%s", m, didYouMean(m, attachmentModes))
	}
}

// volumeOverlaps refuses two group volumes that claim the same volume for
// one alloc: an alloc holds one claim per volume (the state machine keys
// claims by alloc and volume), so a second block naming it could only be a
// mistake or a second mount, which is what volume_mount is for. Two blocks
// overlap when they name the same source with the same per_alloc, or when
// one's source is a per_alloc source with an index appended
// ("data[0]" beside per_alloc "data"): that is its claim for the alloc of
// that index. Any index counts, not only those below count, since scaling
// the group reaches it. The error is on the later block (by name), naming
// the earlier one and where it is.
func (v *validator) volumeOverlaps(p path, g *pb.TaskGroup) {
	type claimer struct {
		name string
		req  *pb.VolumeRequest
	}
	var seen []claimer
	for _, name := range sortedKeys(g.GetVolumes()) {
		req := g.GetVolumes()[name]
		if req == nil || req.GetSource() == "" || req.GetType() != "csi" {
			continue
		}
		for _, o := range seen {
			why := volumeOverlap(o.req, req)
			if why == "" {
				continue
			}
			at := ""
			if pos := v.pos.of(p.in("volume", o.name)); pos.IsValid() {
				at = " (" + pos.String() + ")"
			}
			v.add(p.in("volume", name).f("source"), "%s group volume %q%s claims already; an alloc holds one claim per volume: "+
				"declare it once and mount it twice with volume_mount", why, o.name, at)
			break
		}
		seen = append(seen, claimer{name, req})
	}
}

// volumeOverlap says how b claims a volume a claims too, "" when they
// never claim the same one.
func volumeOverlap(a, b *pb.VolumeRequest) string {
	switch {
	case a.GetPerAlloc() == b.GetPerAlloc() && a.GetSource() == b.GetSource():
		if a.GetPerAlloc() {
			return fmt.Sprintf("per_alloc source %q is the one", b.GetSource())
		}
		return fmt.Sprintf("%q is the volume", b.GetSource())
	case a.GetPerAlloc() && !b.GetPerAlloc():
		if i, ok := allocIndexOf(b.GetSource(), a.GetSource()); ok {
			return fmt.Sprintf("%q is the volume the alloc of index %d of per_alloc", b.GetSource(), i)
		}
	case b.GetPerAlloc() && !a.GetPerAlloc():
		if i, ok := allocIndexOf(a.GetSource(), b.GetSource()); ok {
			return fmt.Sprintf("per_alloc source %q resolves, for the alloc of index %d, to %q, the volume", b.GetSource(), i, a.GetSource())
		}
	}
	return ""
}

// allocIndexOf reports whether id is what per_alloc source base resolves
// to for some alloc index ("base[<index>]"), and that index.
func allocIndexOf(id, base string) (int, bool) {
	rest, ok := strings.CutPrefix(id, base+"[")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, "]")
	if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	return i, err == nil
}

func (v *validator) task(p path, job *pb.Job, g *pb.TaskGroup, t *pb.Task) {
	v.name(p, "task name", t.GetName())
	if t.GetDriver() == "" {
		v.add(p.f("driver"), "required")
	}
	if r := t.GetResources(); r == nil {
		v.add(p.f("resources"), "missing (Canonicalize fills in the default)")
	} else {
		if r.GetCpuMhz() < 1 {
			v.add(p.f("resources").f("cpu"), "must be positive (MHz), got %d", r.GetCpuMhz())
		}
		if r.GetMemoryMb() < 1 {
			v.add(p.f("resources").f("memory"), "must be positive (MB), got %d", r.GetMemoryMb())
		}
	}
	v.durationMs(p.f("kill_timeout"), t.GetKillTimeoutMs())
	if _, err := sdk.ParseSignal(t.GetKillSignal()); err != nil {
		v.add(p.f("kill_signal"), "unknown signal %q (a name such as \"SIGINT\", or a number)", t.GetKillSignal())
	}
	for _, k := range sortedKeys(t.GetEnv()) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			v.add(p.f("env"), "invalid variable name %q", k)
		}
	}
	v.meta(p.f("meta"), t.GetMeta())
	if l := t.GetLifecycle(); l != nil {
		switch l.GetHook() {
		case pb.TaskHook_TASK_HOOK_PRESTART, pb.TaskHook_TASK_HOOK_POSTSTART:
		case pb.TaskHook_TASK_HOOK_POSTSTOP:
			if l.GetSidecar() {
				v.add(p.f("lifecycle").f("sidecar"), "a poststop task runs after the others have stopped; it cannot be a sidecar")
			}
		default:
			v.add(p.f("lifecycle").f("hook"), `must be "prestart", "poststart" or "poststop"`)
		}
	}
	for i, c := range t.GetConstraints() {
		v.constraint(p.at("constraint", i), c, true)
	}
	// taskPaths: the mounts' task paths so far, with what mounts there.
	taskPaths := map[string]string{}
	if cp := t.GetCsiPlugin(); cp != nil {
		taskPaths[pathpkg.Clean(cp.GetStagePublishBaseDir())] = "csi_plugin.stage_publish_base_dir"
		taskPaths[pathpkg.Clean(cp.GetMountDir())] = "csi_plugin.mount_dir"
	}
	// envNames: the BERTH_VOLUME_<NAME> of each volume mounted so far.
	envNames := map[string]string{}
	for i, m := range t.GetVolumeMounts() {
		mp := p.at("volume_mount", i)
		switch {
		case m.GetVolume() == "":
			v.add(mp.f("volume"), "required: the name of one of the group's volumes")
		case g.GetVolumes()[m.GetVolume()] == nil:
			v.add(mp.f("volume"), "the group declares no volume %q%s", m.GetVolume(), volumesHint(m.GetVolume(), g))
		default:
			env := rules.VolumeEnvName(m.GetVolume())
			if o, ok := envNames[env]; ok && o != m.GetVolume() {
				v.add(mp.f("volume"), "volumes %q and %q are both named %s in the task's environment: rename one", o, m.GetVolume(), env)
			} else {
				envNames[env] = m.GetVolume()
			}
		}
		v.propagation(mp, m, g.GetVolumes()[m.GetVolume()])
		// A driver mounts the volume there, and refuses (at start, after the
		// claim, on every restart) a destination that is not an absolute,
		// clean task path or that another mount of the task has.
		d := pathpkg.Clean(m.GetDestination())
		switch {
		case m.GetDestination() == "":
			v.add(mp.f("destination"), "required: where the volume appears in the task")
		case !v.taskDir(mp.f("destination"), m.GetDestination()):
		case taskPaths[d] != "":
			v.add(mp.f("destination"), "%q is also the task path of %s: each mount needs its own", d, taskPaths[d])
		default:
			taskPaths[d] = fmt.Sprintf("volume_mount[%d]", i)
		}
	}
	if cp := t.GetCsiPlugin(); cp != nil {
		pp := p.f("csi_plugin")
		if cp.GetId() == "" {
			v.add(pp.f("id"), "required: the plugin's ID, which volumes name")
		} else {
			v.name(pp.f("id"), "plugin ID", cp.GetId())
		}
		switch cp.GetType() {
		case "controller":
		case "node", "monolith":
			if job.GetType() == pb.JobType_JOB_TYPE_BATCH {
				v.add(pp.f("type"), "a %s plugin must keep running while volumes are mounted; it cannot be in a batch job", cp.GetType())
			}
		default:
			v.add(pp.f("type"), `must be "controller", "node" or "monolith", got %q`, cp.GetType())
		}
		if n := cp.GetHealthTimeoutMs(); n <= 0 {
			v.add(pp.f("health_timeout"), "must be positive, got %s", fmtMs(n))
		} else {
			v.durationMs(pp.f("health_timeout"), n)
		}
		mountOK := v.taskDir(pp.f("mount_dir"), cp.GetMountDir())
		stageOK := v.taskDir(pp.f("stage_publish_base_dir"), cp.GetStagePublishBaseDir())
		if mountOK && stageOK {
			if m, s := pathpkg.Clean(cp.GetMountDir()), pathpkg.Clean(cp.GetStagePublishBaseDir()); m == s || within(m, s) || within(s, m) {
				// Two mounts, one inside the other, would hide one or
				// propagate the plugin's volume mounts into its socket dir.
				v.add(pp.f("stage_publish_base_dir"), "%q and mount_dir %q overlap: the task gets each as a mount of its own", s, m)
			}
		}
	}
	if l := t.GetLogs(); l == nil {
		v.add(p.f("logs"), "missing (Canonicalize fills in the default)")
	} else {
		if l.GetMaxFiles() < 1 {
			v.add(p.f("logs").f("max_files"), "must be at least 1")
		}
		if l.GetMaxFileSizeBytes() < 1 {
			v.add(p.f("logs").f("max_file_size"), "must be positive")
		}
	}
}

// taskDir checks a directory as a task sees it (csi_plugin mount_dir,
// stage_publish_base_dir, volume_mount destination) as the drivers do
// (sdk's validateMounts): absolute, with no ".." element (which could lead
// out of the task's root) and no NUL, since a driver mounts it there, and
// not the task's root. "/data/" and "/data/./x" are the paths they clean
// to: Canonicalize cleans them, and rules comparing paths compare clean
// ones.
func (v *validator) taskDir(p path, dir string) bool {
	switch {
	case dir == "":
		v.add(p, "required: an absolute path in the task")
	case !pathpkg.IsAbs(dir):
		v.add(p, "must be an absolute path in the task, got %q", dir)
	case strings.ContainsRune(dir, 0):
		v.add(p, "must not contain a NUL byte: %q", dir)
	case slices.Contains(strings.Split(dir, "/"), ".."):
		v.add(p, "must not contain a \"..\" element: %q", dir)
	case pathpkg.Clean(dir) == "/":
		v.add(p, `must not be "/": a mount there would hide the task's whole filesystem`)
	default:
		return true
	}
	return false
}

// within reports whether dir is strictly inside base (both clean).
func within(dir, base string) bool { return strings.HasPrefix(dir, base+"/") }

func volumesHint(name string, g *pb.TaskGroup) string {
	names := sortedKeys(g.GetVolumes())
	if len(names) == 0 {
		return " (declare it with a volume block in the group)"
	}
	return didYouMean(name, names)
}

// name checks a job ID or a group, task, volume or plugin name: they become
// parts of alloc names, directories and API paths.
func (v *validator) name(p path, what, s string) {
	switch {
	case s == "":
		v.add(p, "%s must not be empty", what)
	case len(s) > maxNameLen:
		v.add(p, "%s is longer than %d characters", what, maxNameLen)
	case strings.ContainsFunc(s, func(r rune) bool { return !isNameRune(r) }):
		v.add(p, "%s %q may hold only letters, digits, '_', '-' and '.'", what, s)
	case s == "." || s == "..":
		v.add(p, "%s must not be %q", what, s)
	}
}

func isNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func (v *validator) meta(p path, m map[string]string) {
	for _, k := range sortedKeys(m) {
		if k == "" || strings.ContainsFunc(k, isControl) {
			v.add(p, "invalid key %q", k)
		}
	}
}

// durationMs checks a duration in milliseconds: not negative, and at most
// durations.MaxMs (a larger one would overflow into a negative duration
// where it is added to a time).
func (v *validator) durationMs(p path, n int64) {
	switch {
	case n < 0:
		v.add(p, "must not be negative, got %s", fmtMs(n))
	case n > durations.MaxMs:
		v.add(p, "must be at most %s, got %s", durations.Max, fmtMs(n))
	}
}

// fmtMs formats milliseconds the way a job file writes durations.
func fmtMs(n int64) string {
	if n > durations.MaxMs || n < -durations.MaxMs {
		return fmt.Sprintf("%dms", n) // as a duration it could overflow
	}
	return fmt.Sprint(msDuration(n))
}
