package scheduler_test

import (
	"testing"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

// TestVersionOperator: the version matcher's operators, pre-releases and
// bad input.
func TestVersionOperator(t *testing.T) {
	cases := []struct {
		have, want string
		ok         bool
	}{
		{"1.2.3", "= 1.2.3", true},
		{"1.2.3", "1.2.3", true},
		{"1.2", "== 1.2.0", true},
		{"1.2.3", "!= 1.2.3", false},
		{"1.2.3", "> 1.2", true},
		{"1.2.0", "> 1.2", false},
		{"1.2.0", "<= 1.2", true},
		{"2.0.0", ">= 1.2, < 2", false},
		{"1.9.9", ">= 1.2, < 2", true},
		{"1.2.9", "~> 1.2.3", true},
		{"1.3.0", "~> 1.2.3", false},
		{"2.0.0-beta", "< 2.0.0", true},
		{"2.0.0-beta.2", "> 2.0.0-beta.1", true},
		{"v1.4.0+build7", ">= 1.4", true},
		{"banana", ">= 1.0", false},
		{"1.0", ">= x", false},
		{"1.0", "", false},
	}
	for _, tc := range cases {
		n := schedtest.Node("n")
		n.Meta["v"] = tc.have
		c := &pb.Constraint{Attribute: "${meta.v}", Operator: "version", Value: tc.want}
		st := schedtest.NewState()
		st.AddNode(n)
		job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1)
		job.Constraints = []*pb.Constraint{c}
		st.AddJob(job)
		res := run(t, st, schedtest.Eval("e", job))
		if got := len(res.Plan.GetAllocs()) == 1; got != tc.ok {
			t.Errorf("%q version %q: placed %v, want %v", tc.have, tc.want, got, tc.ok)
		}
	}
}

// TestNodeAttribute: the documented targets resolve, unknown ones do not.
func TestNodeAttribute(t *testing.T) {
	n := schedtest.Node("id1")
	n.Fingerprint.CpuTotalMhz = 9600
	n.Fingerprint.MemoryBytes = 1 << 30
	n.Fingerprint.BerthVersion = "0.3.0"
	for target, want := range map[string]string{
		"${node.unique.id}":         "id1",
		"${node.unique.name}":       "name-id1",
		"${node.status}":            "ready",
		"${attr.kernel.name}":       "linux",
		"${attr.os.name}":           "linux",
		"${attr.cpu.arch}":          "amd64",
		"${attr.unique.hostname}":   "host-id1",
		"${attr.cpu.numcores}":      "4",
		"${attr.cpu.totalcompute}":  "9600",
		"${attr.memory.totalbytes}": "1073741824",
		"${attr.berth.version}":     "0.3.0",
		"${attr.kernel.version}":    "6.1.0",
		"${driver.mock}":            "1",
		"${driver.mock.version}":    "1.0.0",
		"plain literal":             "plain literal",
	} {
		got, ok := scheduler.NodeAttribute(n, target)
		if !ok || got != want {
			t.Errorf("%s = %q, %v; want %q", target, got, ok, want)
		}
	}
	for _, target := range []string{"${node.class}", "${attr.nope}", "${meta.nope}", "${driver.docker}", "${driver.mock.nope}", "${what}"} {
		if got, ok := scheduler.NodeAttribute(n, target); ok {
			t.Errorf("%s resolved to %q", target, got)
		}
	}
}
