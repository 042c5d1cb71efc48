package scheduler_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// TestDiff: per group added/deleted/edited/none with one line per changed
// field, job-level lines apart, and registration bookkeeping ignored.
func TestDiff(t *testing.T) {
	old := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 2)
	old.Groups[0].Tasks[0].Config = map[string]*driverpb.ConfigValue{"run_for": {Kind: &driverpb.ConfigValue_StringValue{StringValue: "5s"}}}
	keep := proto.Clone(old.Groups[0]).(*pb.TaskGroup)
	keep.Name = "keep"
	gone := proto.Clone(old.Groups[0]).(*pb.TaskGroup)
	gone.Name = "gone"
	old.Groups = append(old.Groups, keep, gone)

	new := proto.Clone(old).(*pb.Job)
	new.Version, new.JobModifyIndex, new.SubmittedAt = 4, 99, 12345
	new.Priority = 70
	new.Meta = map[string]string{"team": "infra"}
	web := new.Groups[0]
	web.Count = 3
	web.Tasks[0].Driver = "raw_exec"
	web.Tasks[0].Env = map[string]string{"A": "1"}
	web.Tasks[0].Config["run_for"] = &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_StringValue{StringValue: "9s"}}
	web.Tasks[0].Config["args"] = sdk.ListValue("-v", "3600")
	web.Tasks[0].Config["labels"] = sdk.MapValue(map[string]string{"b": "2", "a": "1", "app.io/name": "x"})
	web.Tasks[0].Config["grace"] = sdk.DurationValue(90 * time.Second)
	web.Tasks = append(web.Tasks, &pb.Task{Name: "side", Driver: "mock"})
	web.Constraints = []*pb.Constraint{{Attribute: "${meta.rack}", Operator: "=", Value: "r1"}}
	added := proto.Clone(keep).(*pb.TaskGroup)
	added.Name = "added"
	new.Groups = []*pb.TaskGroup{web, new.Groups[1], added}

	d := scheduler.Diff(old, new)
	equal(t, "type", d.Type, scheduler.DiffEdited)
	equal(t, "job fields", d.Fields, []string{`priority: 50 => 70`, `meta[team]: added "infra"`})
	got := map[string]*pb.GroupDiff{}
	for _, g := range d.Groups {
		got[g.GetName()] = g
	}
	equal(t, "group types", map[string]string{
		"web": got["web"].GetType(), "keep": got["keep"].GetType(), "gone": got["gone"].GetType(), "added": got["added"].GetType(),
	}, map[string]string{"web": "edited", "keep": "none", "gone": "deleted", "added": "added"})
	equal(t, "web fields", got["web"].GetFields(), []string{
		`count: 2 => 3`,
		`constraints: [] => [{attribute="${meta.rack}" operator="=" value="r1"}]`,
		`task side: added`,
		`task task driver: "mock" => "raw_exec"`,
		`task task config[args]: added ["-v", "3600"]`,
		`task task config[grace]: added "1m30s"`,
		`task task config[labels]: added {a = "1", "app.io/name" = "x", b = "2"}`,
		`task task config[run_for]: "5s" => "9s"`,
		`task task env[A]: added "1"`,
	})
	equal(t, "order", []string{d.Groups[0].GetName(), d.Groups[3].GetName()}, []string{"added", "web"})

	equal(t, "new job", scheduler.Diff(nil, new).Type, scheduler.DiffAdded)
	equal(t, "purge", scheduler.Diff(old, nil).Type, scheduler.DiffDeleted)
	same := proto.Clone(old).(*pb.Job)
	same.Version = 7
	equal(t, "same", scheduler.Diff(old, same).Type, scheduler.DiffNone)
}

// TestPlanJob: `job plan` diffs against the stored job and runs the
// scheduler with the new version in its place, without changing the state.
func TestPlanJob(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	job.JobModifyIndex = 17
	st.AddJob(job)
	next := proto.Clone(job).(*pb.Job)
	next.Groups[0].Count = 4
	next.Groups[0].Tasks[0].Env = map[string]string{"V": "2"}
	next.Update = &pb.UpdateStrategy{MaxParallel: 1}
	resp, res, err := scheduler.PlanJob(st, next, scheduler.Options{Now: now, NewID: schedtest.Seq("plan")})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "diff type", resp.GetDiffType(), scheduler.DiffEdited)
	equal(t, "job modify index", resp.GetJobModifyIndex(), uint64(17))
	equal(t, "fields", resp.GetFields(), []string{`update.max_parallel: 0 => 1`})
	if len(resp.GetGroups()) != 1 {
		t.Fatalf("groups: %v", resp.GetGroups())
	}
	equal(t, "updates", resp.GetGroups()[0].GetUpdates(), &pb.PlanAnnotation{Place: 1, DestructiveUpdate: 1, Ignore: 2})
	equal(t, "would-be version", res.Plan.GetJobVersion(), uint64(1))
	stored, _ := st.Job("j")
	equal(t, "state untouched", stored.GetVersion(), uint64(0))

	// A plan that cannot place says why.
	huge := proto.Clone(job).(*pb.Job)
	huge.Groups[0].Count = 4
	huge.Groups[0].Tasks[0].Resources.MemoryMb = 100_000
	resp, _, err = scheduler.PlanJob(st, huge, scheduler.Options{Now: now, NewID: schedtest.Seq("plan")})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "failed", resp.GetFailedTgAllocs()["web"].GetDimensionExhausted()["memory"], int32(3))

	// A new job is "added" and placed in full.
	fresh := schedtest.Job("fresh", pb.JobType_JOB_TYPE_BATCH, 2)
	resp, _, err = scheduler.PlanJob(st, fresh, scheduler.Options{Now: now, NewID: schedtest.Seq("plan")})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "added", []any{resp.GetDiffType(), resp.GetGroups()[0].GetType(), resp.GetGroups()[0].GetUpdates().GetPlace()}, []any{"added", "added", int32(2)})
}

type brokenState struct{ *schedtest.State }

var errDisk = errors.New("snapshot closed")

func (brokenState) AllocsByJob(string) ([]*pb.Allocation, error) { return nil, errDisk }

// TestScheduleRefusals: bad input and state errors come back with codes
// and name what was wrong.
func TestScheduleRefusals(t *testing.T) {
	st := schedtest.NewState()
	_, err := scheduler.Schedule(st, &pb.Evaluation{Id: "e1"}, scheduler.Options{NewID: schedtest.Seq("x")})
	if !errors.Is(err, scheduler.ErrBadEvaluation) || errcode.Code(err) != codes.InvalidArgument {
		t.Errorf("no job ID: %v (%s)", err, errcode.Code(err))
	}
	_, err = scheduler.Schedule(st, &pb.Evaluation{Id: "e1", JobId: "j"}, scheduler.Options{})
	if !errors.Is(err, scheduler.ErrBadOptions) {
		t.Errorf("no NewID: %v", err)
	}
	_, err = scheduler.Schedule(st, &pb.Evaluation{Id: "e1", JobId: "gone"}, scheduler.Options{NewID: schedtest.Seq("x")})
	if !errors.Is(err, scheduler.ErrBadEvaluation) || err.Error() != "evaluation cannot be scheduled: eval e1 for job gone has type JOB_TYPE_UNSPECIFIED" {
		t.Errorf("unknown type: %v", err)
	}
	job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1)
	st.AddJob(job)
	_, err = scheduler.Schedule(brokenState{st}, schedtest.Eval("e1", job), scheduler.Options{NewID: schedtest.Seq("x")})
	var se *scheduler.StateError
	if !errors.As(err, &se) || !errors.Is(err, errDisk) || se.What != "allocs of job j" {
		t.Errorf("state error: %v", err)
	}
}
