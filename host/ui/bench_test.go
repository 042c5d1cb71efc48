package ui

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// bigFixtures is a cluster of 100 jobs with 5 allocs each (500 allocs) on
// 50 nodes, and 200 volumes each claimed by one alloc (a quarter of the
// claims releasing with an error).
func bigFixtures() *fakeAPI {
	f := fixtures()
	for n := range 50 {
		f.nodes = append(f.nodes, &pb.Node{Id: fmt.Sprintf("node-%03d", n), Name: fmt.Sprintf("n%03d", n), Status: pb.NodeStatus_NODE_STATUS_READY,
			Drivers: map[string]*pb.DriverInfo{"raw_exec": {Detected: true, Healthy: true}, "exec": {Detected: true, Healthy: true}}})
	}
	for j := range 100 {
		id := fmt.Sprintf("job-%03d", j)
		f.jobs = append(f.jobs, &pb.Job{Id: id, Name: id, Type: pb.JobType_JOB_TYPE_SERVICE, Status: pb.JobStatus_JOB_STATUS_RUNNING,
			Groups: []*pb.TaskGroup{{Name: "app", Count: 5, Tasks: []*pb.Task{{Name: "t", Driver: "raw_exec"}}}}})
		for a := range 5 {
			f.allocs = append(f.allocs, &pb.Allocation{Id: fmt.Sprintf("alloc-%03d-%d", j, a), JobId: id, TaskGroup: "app",
				NodeId: fmt.Sprintf("node-%03d", (j*5+a)%50), ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING,
				TaskStates: map[string]*pb.TaskState{"t": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING,
					Events: []*pb.TaskEvent{{Type: "Received"}, {Type: "Task Setup"}, {Type: "Started"}}}}})
		}
	}
	for v := range 200 {
		id := fmt.Sprintf("vol-%03d", v)
		c := &pb.Claim{Id: "claim-" + id, VolumeId: id, AllocId: f.allocs[v].GetId(), NodeId: f.allocs[v].GetNodeId(), State: pb.ClaimState_CLAIM_STATE_IN_USE}
		if v%4 == 0 {
			c.State, c.Attempts, c.LastError = pb.ClaimState_CLAIM_STATE_RELEASING, 2, &pb.VolumeError{Message: "busy"}
		}
		f.volumes = append(f.volumes, &pb.VolumeView{Volume: &pb.Volume{Id: id, PluginId: "hostpath", Schedulable: true}, Claims: []*pb.Claim{c}})
	}
	return f
}

// BenchmarkPages renders each page over bigFixtures, server side: the
// in-process API reads (JSON encoded by the fake, decoded by the API
// client, as through the agent's handlers) and the template.
func BenchmarkPages(b *testing.B) {
	f := bigFixtures()
	h, err := New(f.handler(), nil)
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range h.Routes() {
		mux.HandleFunc("GET "+r.Pattern, r.Serve)
	}
	for _, p := range []string{"/ui/", "/ui/jobs", "/ui/jobs/job-042", "/ui/allocs/alloc-042-1", "/ui/nodes", "/ui/nodes/node-007", "/ui/plugins/hostpath", "/ui/volumes", "/ui/volumes/vol-008"} {
		b.Run(p, func(b *testing.B) {
			var size int
			for b.Loop() {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: HTTP %d", p, rec.Code)
				}
				size = rec.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/page")
		})
	}
}

// BenchmarkOverviewLarge renders the overview over the bench's large shape
// (1,000 nodes, 10,000 volumes each claimed once, 100 jobs), a tenth of
// the claims on their way with an error: the page's weight stays bounded
// (counts, not rows; 50 claims per state) whatever the cluster's size.
// The API reads are served by the fake (the servers' own cost is not in
// it).
func BenchmarkOverviewLarge(b *testing.B) {
	f := fixtures()
	for n := range 1000 {
		f.nodes = append(f.nodes, &pb.Node{Id: fmt.Sprintf("node-%04d", n), Status: pb.NodeStatus_NODE_STATUS_READY})
	}
	for j := range 100 {
		f.jobs = append(f.jobs, &pb.Job{Id: fmt.Sprintf("job-%03d", j), Status: pb.JobStatus_JOB_STATUS_RUNNING})
	}
	for v := range 10_000 {
		id := fmt.Sprintf("vol-%05d", v)
		c := &pb.Claim{Id: "claim-" + id, VolumeId: id, AllocId: fmt.Sprintf("alloc-%05d", v), NodeId: fmt.Sprintf("node-%04d", v%1000), State: pb.ClaimState_CLAIM_STATE_IN_USE}
		if v%10 == 0 {
			c.State, c.Attempts, c.LastError = pb.ClaimState_CLAIM_STATE_RELEASING, 3, &pb.VolumeError{Message: "NodeUnpublishVolume: device busy"}
		}
		f.volumes = append(f.volumes, &pb.VolumeView{Volume: &pb.Volume{Id: id, PluginId: "hostpath"}, Claims: []*pb.Claim{c}})
	}
	h, err := New(f.handler(), nil)
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, r := range h.Routes() {
		mux.HandleFunc("GET "+r.Pattern, r.Serve)
	}
	var size int
	for b.Loop() {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/", nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("HTTP %d", rec.Code)
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/page")
}
