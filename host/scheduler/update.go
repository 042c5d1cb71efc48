package scheduler

import (
	"sort"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/durations"
	"berth.dev/berth/rpc/pb"
)

// UpdateKind is what moving an alloc from one job version to another takes.
type UpdateKind int

const (
	// UpdateNone: the group is the same.
	UpdateNone UpdateKind = iota
	// UpdateInPlace: only things a running alloc does not see changed
	// (count, restart, reschedule and update policies, constraints, job
	// meta, kill_timeout, kill_signal, leader, priority); the alloc keeps
	// running and is moved to the new version.
	UpdateInPlace
	// UpdateDestructive: something a task sees at start changed; the alloc
	// is stopped and a new one placed.
	UpdateDestructive
)

// GroupUpdate decides how allocs of old move to new, by Nomad's rule:
// whatever a task is started with is destructive — the set of tasks, a
// task's driver, config, env, resources, user, task meta, lifecycle,
// volume mounts, csi_plugin and logs; the group's volumes and meta (they
// reach the tasks' environment). Everything else is in place. (Job meta is
// in place, as in Nomad.)
func GroupUpdate(old, new *pb.TaskGroup) UpdateKind {
	if old == nil || new == nil {
		return UpdateDestructive
	}
	if len(old.GetTasks()) != len(new.GetTasks()) ||
		!mapsEqual(old.GetMeta(), new.GetMeta()) ||
		!volumesEqual(old.GetVolumes(), new.GetVolumes()) {
		return UpdateDestructive
	}
	byName := map[string]*pb.Task{}
	for _, t := range old.GetTasks() {
		byName[t.GetName()] = t
	}
	for _, t := range new.GetTasks() {
		o := byName[t.GetName()]
		if o == nil || taskDestructive(o, t) {
			return UpdateDestructive
		}
	}
	if proto.Equal(old, new) {
		return UpdateNone
	}
	return UpdateInPlace
}

func taskDestructive(a, b *pb.Task) bool {
	if a.GetDriver() != b.GetDriver() || a.GetUser() != b.GetUser() ||
		!mapsEqual(a.GetEnv(), b.GetEnv()) || !mapsEqual(a.GetMeta(), b.GetMeta()) {
		return true
	}
	if len(a.GetConfig()) != len(b.GetConfig()) {
		return true
	}
	for k, v := range a.GetConfig() {
		w, ok := b.GetConfig()[k]
		if !ok || !proto.Equal(v, w) {
			return true
		}
	}
	ra, rb := normResources(a.GetResources()), normResources(b.GetResources())
	if ra != rb {
		return true
	}
	if !proto.Equal(a.GetLifecycle(), b.GetLifecycle()) ||
		!proto.Equal(a.GetCsiPlugin(), b.GetCsiPlugin()) ||
		!proto.Equal(a.GetLogs(), b.GetLogs()) ||
		len(a.GetVolumeMounts()) != len(b.GetVolumeMounts()) {
		return true
	}
	for i := range a.GetVolumeMounts() {
		if !proto.Equal(a.GetVolumeMounts()[i], b.GetVolumeMounts()[i]) {
			return true
		}
	}
	return false
}

func normResources(r *pb.TaskResources) [2]int64 {
	cpu, mem := r.GetCpuMhz(), r.GetMemoryMb()
	if cpu <= 0 {
		cpu = DefaultTaskCPUMHz
	}
	if mem <= 0 {
		mem = DefaultTaskMemoryMB
	}
	return [2]int64{cpu, mem}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			return false
		}
	}
	return true
}

func volumesEqual(a, b map[string]*pb.VolumeRequest) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !proto.Equal(v, w) {
			return false
		}
	}
	return true
}

// updateStrategy is the group's update block, or the job's.
func updateStrategy(job *pb.Job, tg *pb.TaskGroup) *pb.UpdateStrategy {
	if tg.GetUpdate() != nil {
		return tg.GetUpdate()
	}
	return job.GetUpdate()
}

// healthy reports whether an alloc of the new version counts as done for
// a rolling update: running, with every task started at least
// min_healthy_ms before now. Without task states, the alloc's last change
// stands in for the start.
func healthy(a *pb.Allocation, minHealthyMS, now int64) bool {
	if a.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING {
		return false
	}
	since := durations.AddMs(now, -minHealthyMS)
	if len(a.GetTaskStates()) == 0 {
		return a.GetModifiedAt() <= since
	}
	for _, ts := range a.GetTaskStates() {
		if ts.GetStartedAt() == 0 || ts.GetStartedAt() > since {
			return false
		}
	}
	return true
}

// RollingUpdateRecheckMS is the least wait before the follow-up eval of a
// rolling update held back by max_parallel: min_healthy_ms when longer. It
// stops an update waiting on slow starts from turning into a busy loop of
// evaluations.
const RollingUpdateRecheckMS = 1000

// destructiveBudget returns how many destructive updates this eval may
// make (-1: no limit) and the strategy's min_healthy_ms.
func destructiveBudget(job *pb.Job, tg *pb.TaskGroup, current []*pb.Allocation, now int64) (int, int64) {
	u := updateStrategy(job, tg)
	if u.GetMaxParallel() <= 0 {
		return -1, u.GetMinHealthyMs()
	}
	budget := int(u.GetMaxParallel())
	for _, a := range current {
		if !healthy(a, u.GetMinHealthyMs(), now) {
			budget--
		}
	}
	return max(budget, 0), u.GetMinHealthyMs()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
