package jobspec

import (
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

func limitsJob(groups, tasksPerGroup int, count int32) *pb.Job {
	j := &pb.Job{Id: "web", Name: "web", Type: pb.JobType_JOB_TYPE_SERVICE}
	for g := range groups {
		tg := &pb.TaskGroup{Name: "g" + strings.Repeat("x", g), Count: count}
		for range tasksPerGroup {
			tg.Tasks = append(tg.Tasks, &pb.Task{Name: "t", Driver: "mock"})
		}
		j.Groups = append(j.Groups, tg)
	}
	return j
}

// Each limit refuses a job one over it, names the limit, the job's value
// and the config key, and lets a job at the limit through.
func TestCheckLimitsNamesTheLimitTheValueAndTheKey(t *testing.T) {
	l := Limits{MaxGroupCount: 10, MaxGroups: 3, MaxTasks: 4, MaxAllocs: 20, MaxBytes: 4000}
	big := limitsJob(1, 1, 1)
	big.Meta = map[string]string{"blob": strings.Repeat("b", 4000)}
	for _, tc := range []struct {
		name string
		job  *pb.Job
		want string // "" for a job within every limit
	}{
		{"at every limit", limitsJob(2, 2, 10), ""},
		{"count", limitsJob(1, 1, 11), `group "g": count: 11 is over the limit of 10 per group (server.job_max_count)`},
		{"count of two billion", limitsJob(1, 1, math.MaxInt32), `group "g": count: 2147483647 is over the limit of 10 per group (server.job_max_count)`},
		{"groups", limitsJob(4, 1, 1), `job "web" has 4 groups, over the limit of 3 (server.job_max_groups)`},
		{"tasks", limitsJob(1, 5, 1), `job "web" has 5 tasks, over the limit of 4 (server.job_max_tasks)`},
		{"allocs", limitsJob(3, 1, 7), `job "web" asks for 21 allocations in all, over the limit of 20 (server.job_max_allocs)`},
		{"bytes", big, `bytes encoded, over the limit of 4000 bytes (server.job_max_size)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckLimits(tc.job, l)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("job within the limits refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrJobLimit) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckLimits = %v, want ErrJobLimit saying %q", err, tc.want)
			}
		})
	}
}

func TestLimitsDefaults(t *testing.T) {
	got := Limits{MaxGroups: 7}.WithDefaults()
	want := Limits{MaxGroupCount: 1000, MaxGroups: 7, MaxTasks: 500, MaxAllocs: 5000, MaxBytes: 1 << 20}
	if got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	if err := CheckLimits(limitsJob(1, 1, 1001), Limits{}); !errors.Is(err, ErrJobLimit) {
		t.Fatalf("a count over the default limit: %v", err)
	}
}

// The check reads the count; it never builds anything per allocation, so
// a count of two billion costs what a count of one does.
func TestCheckLimitsCostDoesNotGrowWithTheCount(t *testing.T) {
	small, huge := limitsJob(1, 1, 1), limitsJob(1, 1, math.MaxInt32)
	a := testing.AllocsPerRun(20, func() { _ = CheckLimits(small, Limits{}) })
	b := testing.AllocsPerRun(20, func() { _ = CheckLimits(huge, Limits{}) })
	// The refusal builds its one error (message, entry, list): a few
	// allocations, never a number that grows with the count.
	if b > a+20 {
		t.Fatalf("CheckLimits allocated %.0f times for count 2^31-1, %.0f for count 1", b, a)
	}
}

// job validate's parse names the file position of the count.
func TestParseWithLimitsGivesThePosition(t *testing.T) {
	src := []byte(`job "web" {
  group "g" {
    count = 2147483647
    task "t" {
      driver = "mock"
    }
  }
}
`)
	if _, err := Parse("web.hcl", src); err != nil {
		t.Fatalf("without limits: %v", err)
	}
	_, err := Parse("web.hcl", src, WithLimits(Limits{}))
	want := `web.hcl:3:5: group "g": count: 2147483647 is over the limit of 1000 per group (server.job_max_count)`
	if !errors.Is(err, ErrJobLimit) || err.Error() != want {
		t.Fatalf("Parse = %v, want %q", err, want)
	}
}

// SpecSize measures a job the same as submitted and as the servers store
// it, with its status, version, submit time and indexes set.
func TestSpecSizeLeavesOutServerSetFields(t *testing.T) {
	j := &pb.Job{Id: "web", Meta: map[string]string{"k": "v"}, Groups: []*pb.TaskGroup{{Name: "g", Count: 2}}}
	want := proto.Size(j)
	stored := proto.Clone(j).(*pb.Job)
	stored.Stop, stored.Status, stored.StatusDescription = true, pb.JobStatus_JOB_STATUS_RUNNING, "running for a while now"
	stored.Version, stored.SubmittedAt = 12, 1_795_283_669_933_240_309
	stored.CreateIndex, stored.ModifyIndex, stored.JobModifyIndex = 1<<40, 1<<41, 1<<42
	if got := SpecSize(stored); got != want {
		t.Fatalf("SpecSize of the stored job = %d, want %d (its size as submitted)", got, want)
	}
}
