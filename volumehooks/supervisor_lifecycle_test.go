package volumehooks

import (
	"context"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// A group may hold a controller task and a node task of one plugin
// (fsm.jobCSITasks merges them into a monolith) or two plugins: each task
// gets its own socket.
func TestTwoPluginTasksOfOneAllocGetDistinctSockets(t *testing.T) {
	dataDir := shortDir(t)
	reg := registry.New(newMemStore())
	f := NewCSIPluginSupervisor(SupervisorConfig{DataDir: dataDir, Registry: reg})
	alloc := &pb.Allocation{Id: allocID, CreateIndex: 1}
	ctrl := &pb.Task{Name: "controller", Driver: "raw_exec", CsiPlugin: &pb.CSIPluginConfig{
		Id: "hp", Type: "controller", MountDir: "/csi", StagePublishBaseDir: "/local/csi", HealthTimeoutMs: 1000}}
	node := &pb.Task{Name: "node", Driver: "raw_exec", CsiPlugin: &pb.CSIPluginConfig{
		Id: "hp", Type: "node", MountDir: "/csi", StagePublishBaseDir: "/local/csi", HealthTimeoutMs: 1000}}
	endpoints := map[string]string{}
	for _, task := range []*pb.Task{ctrl, node} {
		h := f(runhooks.AllocInfo{Alloc: alloc}, task).(runhooks.PrestartHook)
		var resp runhooks.PrestartResponse
		info := runhooks.TaskInfo{Alloc: alloc, Task: task, Driver: mounts(false)}
		if err := h.Prestart(context.Background(), &runhooks.PrestartRequest{TaskInfo: info, Attempt: 1}, &resp); err != nil {
			t.Fatal(err)
		}
		endpoints[task.GetName()] = resp.Env[EnvEndpoint]
	}
	if endpoints["controller"] == endpoints["node"] {
		t.Fatalf("both plugin tasks of alloc %s listen at %s", allocID, endpoints["node"])
	}
}

// The supervisor Context ending (the client shutting down, its tasks left
// running) stops every supervisor without deregistering: the plugin stays
// registered for the next client to find.
func TestContextEndStopsTheSupervisorAndKeepsTheEntry(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newEnv(t, pluginTask("node", time.Minute), func(c *SupervisorConfig) { c.Context = ctx })
	e.start("attempt-1", false)
	e.serve(csifake.New())
	e.waitEntries("CSI_PLUGIN_TYPE_NODE hostpath " + allocID + " healthy=true needs_probe=false")
	e.hook.mu.Lock()
	s := e.hook.sup
	e.hook.mu.Unlock()
	cancel()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the supervisor still runs after its context ended")
	}
	if got := e.entries(); len(got) != 1 || !strings.HasSuffix(got[0], "healthy=true needs_probe=false") {
		t.Fatalf("registry after the context ended: %q, want the entry kept", got)
	}
}

// After a client restart the registry restores the plugin's entry (its
// alloc is live). If the task died while the client was down, its recovery
// fails and the restart policy ends it: the exited hooks run for the lost
// attempt, and the restored entry goes with it rather than staying until
// the alloc is garbage collected.
func TestDeadRecoveredPluginTaskDeregisters(t *testing.T) {
	dataDir := shortDir(t)
	stored := &pb.CSIPluginRegistration{Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, PluginId: "hostpath", AllocId: allocID,
		Endpoint: "unix://" + PluginSocket(dataDir, allocID, "plugin"), Provider: "p", ProviderVersion: "1", Healthy: true, RegisteredAt: 1}
	reg := registry.New(newMemStore(stored))
	if _, err := reg.Restore(func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	task := pluginTask("node", time.Minute)
	alloc := &pb.Allocation{Id: allocID, CreateIndex: 7}
	f := NewCSIPluginSupervisor(SupervisorConfig{DataDir: dataDir, Registry: reg, Logger: testutil.Logger(t)})
	d := &pluginDriver{} // RecoverTask fails: the task died while the client was down
	tr := taskrunner.New(taskrunner.Config{
		Info:   runhooks.TaskInfo{Alloc: alloc, Job: &pb.Job{Id: "plugins"}, Group: &pb.TaskGroup{Name: "g"}, Task: task},
		Driver: d, Hooks: []runhooks.Hook{f(runhooks.AllocInfo{Alloc: alloc}, task)},
		Restart: &pb.RestartPolicy{Attempts: 0, IntervalMs: 60_000, DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_FAIL},
		JobType: pb.JobType_JOB_TYPE_SERVICE, Logger: testutil.Logger(t),
		Restore: &taskrunner.Restore{
			State:  &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING},
			Handle: &driverpb.TaskHandle{Driver: "raw_exec", Config: &driverpb.TaskConfig{Id: allocID + ".plugin.dead"}},
		},
	})
	go tr.Run()
	select {
	case <-tr.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("runner still running")
	}
	if st := tr.State(); st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		t.Fatalf("state %v", st)
	}
	if es := reg.List(pb.CSIPluginType_CSI_PLUGIN_TYPE_UNSPECIFIED); len(es) != 0 {
		t.Fatalf("the plugin task is dead for good, its entry is still registered: %v", es[0].Registration)
	}
}
