package execdriver_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	execdriver "berth.dev/berth/builtin/drivers/exec"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
)

func TestMain(m *testing.M) {
	drivertest.ServeIfPlugin(func(l hclog.Logger) sdk.Driver { return execdriver.New(l) })
	csiPluginIfRequested()
	os.Exit(m.Run())
}

func sh(script string) sdk.ConfigMap {
	return sdk.ConfigMap{"command": sdk.StringValue("/bin/sh"), "args": sdk.ListValue("-c", script)}
}

var enabled = sdk.ConfigMap{"enabled": sdk.BoolValue(true)}

// readyFile is where an exec task sees the harness's ready file: the
// harness puts it at the top of the task directory, which is the task's
// root.
const readyFile = `"/$(basename "$DRIVERTEST_READY_FILE")"`

// execCases are the harness behaviours as shell scripts run inside the
// task's root.
var execCases = drivertest.Cases{
	ExitCode:        func(code int) sdk.ConfigMap { return sh(fmt.Sprintf("exit %d", code)) },
	RunUntilStopped: func() sdk.ConfigMap { return sh(`touch ` + readyFile + `; exec sleep 1000`) },
	IgnoreStopSignal: func() sdk.ConfigMap {
		return sh(`trap "" TERM; touch ` + readyFile + `; exec sleep 1000`)
	},
	ExitAfter: func(code int, d time.Duration) sdk.ConfigMap {
		return sh(fmt.Sprintf("sleep %.3f; exit %d", d.Seconds(), code))
	},
	BadConfigs: []drivertest.BadConfig{
		{Config: sdk.ConfigMap{}, Key: "command"},
		{Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/true"), "args": sdk.StringValue("-x")}, Key: "args"},
		{Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/true"), "cap_add": sdk.ListValue("CAP_NOPE")}, Key: "cap_add"},
	},
	MountsSeen: mountsSeen,
	ReadyFile:  true,
}

func TestConformance(t *testing.T) {
	testutil.RequireRoot(t, "exec isolates tasks with namespaces, mounts and cgroups")
	drivertest.Run(t, drivertest.Harness{PluginConfig: enabled, Cases: execCases})
}

// mountsSeen reads the running task's own mount table (/proc/PID/mountinfo
// of its init, seen from the host): each of cfg's mounts must be mounted at
// its task path, read-only or not, with the propagation the optional
// fields show (shared = bidirectional, master only = host-to-task, none =
// private), and show the host directory's marker file. The host path is
// reported as cfg's when the marker file seen inside matches the host's.
func mountsSeen(ctx context.Context, d sdk.Driver, cfg *driverpb.TaskConfig) ([]*driverpb.Mount, error) {
	st, err := d.InspectTask(ctx, cfg.GetId())
	if err != nil {
		return nil, err
	}
	pid := st.GetAttributes()["pid"]
	entries, err := taskMounts(pid)
	if err != nil {
		return nil, err
	}
	var seen []*driverpb.Mount
	for _, want := range cfg.GetMounts() {
		e, ok := entries[filepath.Clean(want.GetTaskPath())]
		if !ok {
			continue
		}
		m := &driverpb.Mount{TaskPath: want.GetTaskPath(), ReadOnly: e.readOnly, Propagation: e.propagation}
		inside, err1 := os.ReadFile(filepath.Join("/proc", pid, "root", want.GetTaskPath(), "drivertest-mount"))
		outside, err2 := os.ReadFile(filepath.Join(want.GetHostPath(), "drivertest-mount"))
		if err1 == nil && err2 == nil && string(inside) == string(outside) {
			m.HostPath = want.GetHostPath()
		}
		seen = append(seen, m)
	}
	return seen, nil
}

type mountEntry struct {
	readOnly    bool
	propagation driverpb.MountPropagation
}

// taskMounts parses /proc/PID/mountinfo: mount point → what it is.
func taskMounts(pid string) (map[string]mountEntry, error) {
	f, err := os.Open(filepath.Join("/proc", pid, "mountinfo"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]mountEntry{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			continue
		}
		e := mountEntry{
			readOnly:    slices.Contains(strings.Split(fields[5], ","), "ro"),
			propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE,
		}
		var shared, slave bool
		for _, opt := range fields[6:] {
			if opt == "-" {
				break
			}
			shared = shared || strings.HasPrefix(opt, "shared:")
			slave = slave || strings.HasPrefix(opt, "master:")
		}
		switch {
		case shared:
			e.propagation = driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL
		case slave:
			e.propagation = driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK
		}
		out[fields[4]] = e
	}
	return out, sc.Err()
}
