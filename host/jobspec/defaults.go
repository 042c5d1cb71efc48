package jobspec

import (
	"maps"
	pathpkg "path"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// Defaults, Nomad's, so that a job written for Nomad behaves the same here.
const (
	// DefaultPriority is a job's priority when it sets none.
	DefaultPriority = 50
	// DefaultCount is a group's count when it sets none.
	DefaultCount = 1
	// DefaultCPUMHz is what a task without resources.cpu reserves.
	DefaultCPUMHz = 100
	// DefaultMemoryMB is what a task without resources.memory reserves.
	DefaultMemoryMB = 300
	// DefaultKillTimeout is how long a stop waits after the kill signal.
	DefaultKillTimeout = 5 * time.Second
	// DefaultKillSignal is the signal a stop sends first.
	DefaultKillSignal = "SIGTERM"
	// DefaultLogMaxFiles is how many log files of each stream are kept.
	DefaultLogMaxFiles = 10
	// DefaultLogMaxFileSizeMB is logs.max_file_size, which is in MB.
	DefaultLogMaxFileSizeMB = 10
	// DefaultMaxParallel is update.max_parallel when the job sets none.
	DefaultMaxParallel = 1
	// DefaultCSIMountDir is where a csi_plugin task sees its plugin
	// directory (and CSI_ENDPOINT's socket) under an isolating driver.
	DefaultCSIMountDir = "/csi"
	// DefaultCSIStagePublishBaseDir is where a csi_plugin task sees the
	// staging and publish targets of its volumes.
	DefaultCSIStagePublishBaseDir = "/local/csi"
	// DefaultCSIHealthTimeout is how long a csi_plugin task has to become
	// healthy before it is restarted.
	DefaultCSIHealthTimeout = 30 * time.Second
)

// DefaultRestart returns the restart policy of a group that has no restart
// block (or the values its restart block leaves out): a service or system
// task restarts twice in 30m after 15s, a batch task three times in 24h;
// then the task fails.
func DefaultRestart(t pb.JobType) *pb.RestartPolicy {
	if t == pb.JobType_JOB_TYPE_BATCH {
		return &pb.RestartPolicy{Attempts: 3, IntervalMs: ms(24 * time.Hour), DelayMs: ms(15 * time.Second), Mode: pb.RestartMode_RESTART_MODE_FAIL}
	}
	return &pb.RestartPolicy{Attempts: 2, IntervalMs: ms(30 * time.Minute), DelayMs: ms(15 * time.Second), Mode: pb.RestartMode_RESTART_MODE_FAIL}
}

// DefaultReschedule returns the reschedule policy of a group that has no
// reschedule block: a service alloc is replaced without limit, 30s after it
// failed and doubling up to 1h; a batch alloc once in 24h, after 5s. System
// jobs are not rescheduled (nil): their allocs belong to their node.
func DefaultReschedule(t pb.JobType) *pb.ReschedulePolicy {
	switch t {
	case pb.JobType_JOB_TYPE_SYSTEM:
		return nil
	case pb.JobType_JOB_TYPE_BATCH:
		return &pb.ReschedulePolicy{Attempts: 1, IntervalMs: ms(24 * time.Hour), DelayMs: ms(5 * time.Second), MaxDelayMs: ms(5 * time.Second)}
	}
	return &pb.ReschedulePolicy{Unlimited: true, DelayMs: ms(30 * time.Second), MaxDelayMs: ms(time.Hour)}
}

// DefaultResources are what a task without a resources block reserves.
func DefaultResources() *pb.TaskResources {
	return &pb.TaskResources{CpuMhz: DefaultCPUMHz, MemoryMb: DefaultMemoryMB}
}

// DefaultLogs bounds a task's logs when it has no logs block.
func DefaultLogs() *driverpb.LogConfig {
	return &driverpb.LogConfig{MaxFiles: DefaultLogMaxFiles, MaxFileSizeBytes: DefaultLogMaxFileSizeMB << 20}
}

// DefaultUpdate is the rolling update of a job without an update block.
func DefaultUpdate() *pb.UpdateStrategy {
	return &pb.UpdateStrategy{MaxParallel: DefaultMaxParallel}
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// Canonicalize fills in the defaults a job received through the API may
// leave out. Parse has filled them in already (and Canonicalize changes
// nothing there); the server calls it on a job decoded from JSON before
// ValidateJob.
//
// Only what is unset by its nature is filled: an absent block, an empty
// string, an unspecified enum, and numbers for which zero is not allowed
// (priority, resources, log limits). Zero is a real value for count,
// kill_timeout and restart attempts, and proto3 cannot tell it from
// absent, so those stay as sent; a system group's count of 0 becomes 1,
// since it has no other meaning there.
func Canonicalize(job *pb.Job) {
	if job.GetName() == "" {
		job.Name = job.GetId()
	}
	if job.Type == pb.JobType_JOB_TYPE_UNSPECIFIED {
		job.Type = pb.JobType_JOB_TYPE_SERVICE
	}
	if job.Priority == 0 {
		job.Priority = DefaultPriority
	}
	if job.Update == nil {
		job.Update = DefaultUpdate()
	}
	for _, g := range job.GetGroups() {
		if g == nil {
			continue
		}
		if job.Type == pb.JobType_JOB_TYPE_SYSTEM && g.Count == 0 {
			g.Count = 1
		}
		if g.Restart == nil {
			g.Restart = DefaultRestart(job.Type)
		} else if g.Restart.Mode == pb.RestartMode_RESTART_MODE_UNSPECIFIED {
			g.Restart.Mode = pb.RestartMode_RESTART_MODE_FAIL
		}
		if g.Reschedule == nil {
			g.Reschedule = DefaultReschedule(job.Type)
		}
		for _, v := range g.GetVolumes() {
			if v != nil && v.Type == "" {
				v.Type = "csi"
			}
		}
		for _, t := range g.GetTasks() {
			if t != nil {
				canonicalizeTask(t)
			}
		}
	}
}

func canonicalizeTask(t *pb.Task) {
	if t.Resources == nil {
		t.Resources = DefaultResources()
	}
	if t.Resources.CpuMhz == 0 {
		t.Resources.CpuMhz = DefaultCPUMHz
	}
	if t.Resources.MemoryMb == 0 {
		t.Resources.MemoryMb = DefaultMemoryMB
	}
	if t.KillSignal == "" {
		t.KillSignal = DefaultKillSignal
	}
	if t.Logs == nil {
		t.Logs = DefaultLogs()
	}
	if t.Logs.MaxFiles == 0 {
		t.Logs.MaxFiles = DefaultLogMaxFiles
	}
	if t.Logs.MaxFileSizeBytes == 0 {
		t.Logs.MaxFileSizeBytes = DefaultLogMaxFileSizeMB << 20
	}
	// A task path is mounted where it cleans to ("/data/" is "/data"):
	// drivers and the rules comparing paths are given the clean one. An
	// empty or relative one is left for Validate to refuse.
	for _, m := range t.VolumeMounts {
		if m != nil {
			m.Destination = cleanTaskPath(m.Destination)
		}
	}
	if cp := t.CsiPlugin; cp != nil {
		if cp.MountDir == "" {
			cp.MountDir = DefaultCSIMountDir
		}
		if cp.StagePublishBaseDir == "" {
			cp.StagePublishBaseDir = DefaultCSIStagePublishBaseDir
		}
		cp.MountDir = cleanTaskPath(cp.MountDir)
		cp.StagePublishBaseDir = cleanTaskPath(cp.StagePublishBaseDir)
		// A zero health_timeout would restart the plugin before its first
		// probe: it has no meaning of its own, so it is the default.
		if cp.HealthTimeoutMs == 0 {
			cp.HealthTimeoutMs = ms(DefaultCSIHealthTimeout)
		}
	}
}

// clone returns a deep copy of m, typed.
func clone[M proto.Message](m M) M { return proto.Clone(m).(M) }

func msDuration(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// cleanTaskPath is an absolute task path with no ".." element made clean;
// any other is left as given, for Validate to refuse as written.
func cleanTaskPath(dir string) string {
	if !pathpkg.IsAbs(dir) || slices.Contains(strings.Split(dir, "/"), "..") {
		return dir
	}
	return pathpkg.Clean(dir)
}
