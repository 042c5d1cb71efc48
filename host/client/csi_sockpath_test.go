package client

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/csi/registry"
	"berth.dev/berth/host/client/allocrunner"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/volumehooks"
)

// lockedBuffer is a log sink a test reads while the client writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A csi_plugin task on a client whose data_dir makes the plugin's socket
// path too long for a unix socket fails at once: the alloc is reported
// failed to the servers without waiting out the restart delays (an hour
// here; 15s each by default, which is how the alloc used to sit pending
// or running, with a sibling task, for ~40s and nothing in the log), the
// task's events name the path, its length, the limit and the data_dir
// that would fit, the sibling task is stopped, and the client logs the
// error with the alloc and the task.
func TestCSIPluginSocketPathTooLongFailsTheAllocAtOnce(t *testing.T) {
	f := newFakeServer(t)
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	db, m := driversFor(t, dir)
	reg := registry.New(db, registry.WithLogger(logger.Named("registry")))
	// As the agent builds it (host/agent).
	supCtx, stopSupervisors := context.WithCancel(context.Background())
	t.Cleanup(stopSupervisors)
	supervisor := volumehooks.NewCSIPluginSupervisor(volumehooks.SupervisorConfig{DataDir: dir, Registry: reg,
		Logger: logger.Named("csi-supervisor"), Context: supCtx})
	c, err := New(Config{DataDir: dir, NodeName: "csi-node", Servers: []string{f.addr}, Logger: logger,
		Drivers: m.DriverInfos, DriversChanged: m.Changed(), TaskDrivers: ManagerDrivers(m), State: db, CSIRegistry: reg,
		Hooks: allocrunner.Hooks{Task: []func(runhooks.AllocInfo, *pb.Task) runhooks.Hook{supervisor}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)

	j := mockJob(pb.JobType_JOB_TYPE_SERVICE,
		&pb.Task{Name: "plugin", Driver: "mock", KillTimeoutMs: 1000,
			CsiPlugin: &pb.CSIPluginConfig{Id: "hp", Type: "node", MountDir: "/csi", StagePublishBaseDir: "/local/csi"}},
		&pb.Task{Name: "web", Driver: "mock", KillTimeoutMs: 1000})
	j.Groups[0].Restart = &pb.RestartPolicy{Attempts: 2, IntervalMs: 7_200_000, DelayMs: 3_600_000, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	f.place(allocOf("a1", j), j)

	u := waitReported(t, f, "a1", status_(pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED))
	sock := volumehooks.PluginSocket(dir, "a1", "plugin")
	st := u.GetTaskStates()["plugin"]
	if !st.GetFailed() || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || st.GetStartedAt() != 0 {
		t.Fatalf("plugin task reported %v; want dead, failed, never started", st)
	}
	var setup *pb.TaskEvent
	for _, ev := range st.GetEvents() {
		if ev.GetType() == "Setup Failure" {
			setup = ev
		}
		if ev.GetType() == "Restarting" {
			t.Fatalf("the plugin task was restarted: %v", st.GetEvents())
		}
	}
	fits := len(dir) - (len(sock) - volumehooks.MaxSocketPath)
	for _, want := range []string{sock, fmt.Sprintf("is %d bytes", len(sock)), "107",
		fmt.Sprintf("a data_dir of at most %d bytes", fits)} {
		if !strings.Contains(setup.GetMessage(), want) {
			t.Fatalf("setup failure %v does not say %q", setup, want)
		}
	}
	waitReported(t, f, "a1", func(u *pb.AllocClientUpdate) bool {
		return u.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED &&
			u.GetTaskStates()["web"].GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD
	})
	testutil.WaitFor(t, generous, func() error {
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, "[ERROR]") && strings.Contains(l, "task failed to start") &&
				strings.Contains(l, "alloc_id=a1") && strings.Contains(l, "task=plugin") && strings.Contains(l, sock) {
				return nil
			}
		}
		return fmt.Errorf("no error line naming alloc a1, task plugin and %s in the client log", sock)
	})
}
