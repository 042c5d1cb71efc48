package jobspec

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// ErrJobLimit is returned by CheckLimits, and by Parse with WithLimits,
// when a job is larger than a limit of the servers' configuration: too
// high a count, too many groups, tasks or allocations, too many bytes.
// Its message names the limit, the job's value and the config key.
var ErrJobLimit = errcode.New(codes.InvalidArgument, "over a limit")

// Limits bounds what one job may ask for. The servers check a job against
// them before anything else is done with it (register, plan), so a job
// that asks for two billion allocations costs a few comparisons, not the
// memory of planning them; `berth job validate` checks them too. Every
// field is set from the agent's server block; the zero value of a field
// means its default.
type Limits struct {
	// MaxGroupCount bounds one group's count (server.job_max_count).
	MaxGroupCount int64
	// MaxGroups bounds the groups of a job (server.job_max_groups).
	MaxGroups int
	// MaxTasks bounds the tasks of a job, all groups together
	// (server.job_max_tasks).
	MaxTasks int
	// MaxAllocs bounds the allocations a job's groups ask for together,
	// and so what one plan for it places (server.job_max_allocs).
	MaxAllocs int64
	// MaxBytes bounds the job's encoded size (server.job_max_size).
	MaxBytes int
}

// The agent config keys of the limits, as errors name them.
const (
	KeyMaxGroupCount = "server.job_max_count"
	KeyMaxGroups     = "server.job_max_groups"
	KeyMaxTasks      = "server.job_max_tasks"
	KeyMaxAllocs     = "server.job_max_allocs"
	KeyMaxBytes      = "server.job_max_size"
)

// Default limits. A group of a thousand is more than any service we know
// of runs per job (Nomad's own guides scale groups to hundreds); the per
// job bound of 5000 allocations keeps one plan, a single raft command of
// about a kilobyte per allocation, to a few MiB, and one scheduler pass to
// well under a second. A hundred groups and 500 tasks are far beyond what
// a person writes by hand while bounding what a generated job can cost.
// One MiB of encoded job is what Nomad keeps of a job's source and less
// than etcd takes per object; it is checked against MaxJobBytesCeiling.
const (
	DefaultMaxGroupCount = 1000
	DefaultMaxGroups     = 100
	DefaultMaxTasks      = 500
	DefaultMaxAllocs     = 5000
	DefaultMaxBytes      = 1 << 20
)

// MaxJobBytesCeiling is the most server.job_max_size may be: 10 MiB, so
// the largest job fits whatever carries several copies of it within the
// 64 MiB message limit every hop has (driverpb.MaxMessageSize: API body,
// raft command, server to client, client to driver): an API body holding
// the job as JSON (6 x size + 1 MiB, the agent's body limit), a page of
// `job versions` (fsm.JobVersionsKept = 6 copies), a plan with its diff
// (about 2), a client's alloc watch answer (one job over its byte budget
// of half the limit), and a task's start request to its driver with the
// job's environment.
const MaxJobBytesCeiling = 10 << 20

// The largest API body of a job fits the message limit: this constant
// does not compile (overflows uint) otherwise.
const _ = uint(driverpb.MaxMessageSize - (6*MaxJobBytesCeiling + 1<<20))

// WithDefaults returns l with every unset (zero) field at its default.
func (l Limits) WithDefaults() Limits {
	if l.MaxGroupCount == 0 {
		l.MaxGroupCount = DefaultMaxGroupCount
	}
	if l.MaxGroups == 0 {
		l.MaxGroups = DefaultMaxGroups
	}
	if l.MaxTasks == 0 {
		l.MaxTasks = DefaultMaxTasks
	}
	if l.MaxAllocs == 0 {
		l.MaxAllocs = DefaultMaxAllocs
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	return l
}

// WithLimits makes Parse check the job against l (see CheckLimits), with
// positions.
func WithLimits(l Limits) Option {
	return func(o *options) { o.limits = &l }
}

// CheckLimits checks job against l (unset fields at their defaults) and
// returns *Errors whose entries wrap ErrJobLimit, or nil. It reads only the
// job's counts and lengths, and its SpecSize: nothing it does grows with a
// count.
func CheckLimits(job *pb.Job, l Limits) error {
	v := &validator{errs: &Errors{}}
	v.limits(job, l)
	return v.errs.err()
}

func (v *validator) limits(job *pb.Job, l Limits) {
	l = l.WithDefaults()
	root := path{}
	if n := SpecSize(job); n > l.MaxBytes {
		v.addKind(root, ErrJobLimit, "job %q is %d bytes encoded, over the limit of %d bytes (%s)", job.GetId(), n, l.MaxBytes, KeyMaxBytes)
	}
	groups := job.GetGroups()
	if len(groups) > l.MaxGroups {
		v.addKind(root, ErrJobLimit, "job %q has %d groups, over the limit of %d (%s)", job.GetId(), len(groups), l.MaxGroups, KeyMaxGroups)
	}
	var tasks int
	var allocs int64
	countOver := false
	for _, g := range groups {
		p := root.in("group", g.GetName())
		tasks += len(g.GetTasks())
		c := int64(g.GetCount())
		if c > l.MaxGroupCount {
			v.addKind(p.f("count"), ErrJobLimit, "%d is over the limit of %d per group (%s)", c, l.MaxGroupCount, KeyMaxGroupCount)
			countOver = true
		}
		allocs += max(c, 0)
	}
	if tasks > l.MaxTasks {
		v.addKind(root, ErrJobLimit, "job %q has %d tasks, over the limit of %d (%s)", job.GetId(), tasks, l.MaxTasks, KeyMaxTasks)
	}
	// A group over its own limit is the thing to fix; the total it makes
	// would only repeat it.
	if allocs > l.MaxAllocs && !countOver {
		v.addKind(root, ErrJobLimit, "job %q asks for %d allocations in all, over the limit of %d (%s)", job.GetId(), allocs, l.MaxAllocs, KeyMaxAllocs)
	}
}

// SpecSize is the encoded size of job without the fields the servers set
// when they store it (status, version, submit time, raft indexes, stop):
// what job_max_size bounds. A job is measured the same as submitted and as
// stored, so one accepted at register is never over the limit at planning
// or revert. Fields encode apart, so the size is the whole less theirs,
// with no copy of the job.
func SpecSize(job *pb.Job) int {
	return proto.Size(job) - proto.Size(&pb.Job{
		Stop: job.GetStop(), Status: job.GetStatus(), StatusDescription: job.GetStatusDescription(),
		Version: job.GetVersion(), SubmittedAt: job.GetSubmittedAt(),
		CreateIndex: job.GetCreateIndex(), ModifyIndex: job.GetModifyIndex(), JobModifyIndex: job.GetJobModifyIndex(),
	})
}

// Proto returns l (unset fields at their defaults) as the API shows it.
func (l Limits) Proto() *pb.JobLimits {
	l = l.WithDefaults()
	return &pb.JobLimits{JobMaxCount: l.MaxGroupCount, JobMaxGroups: int64(l.MaxGroups), JobMaxTasks: int64(l.MaxTasks),
		JobMaxAllocs: l.MaxAllocs, JobMaxSize: int64(l.MaxBytes)}
}

// LimitsOf reads limits as the API shows them (nil: the defaults).
func LimitsOf(p *pb.JobLimits) Limits {
	return Limits{MaxGroupCount: p.GetJobMaxCount(), MaxGroups: int(p.GetJobMaxGroups()), MaxTasks: int(p.GetJobMaxTasks()),
		MaxAllocs: p.GetJobMaxAllocs(), MaxBytes: int(p.GetJobMaxSize())}.WithDefaults()
}
