package ctrdriver_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"

	"berth.dev/examples/containerd/ctrdriver"
)

// shimsOf lists the PIDs of the shims whose -address is addr.
func shimsOf(t *testing.T, addr string) []string {
	t.Helper()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if i := slices.Index(args, "-address"); i >= 0 && i+1 < len(args) && args[i+1] == addr {
			pids = append(pids, p.Name())
		}
	}
	return pids
}

// Stopping the tests' private containerd after a failed test (a task
// never destroyed) leaves no container process and no shim running.
func TestPrivateContainerdStopLeavesNothingRunning(t *testing.T) {
	needOwnContainerd(t)
	addr, stop, err := startContainerd()
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	d := drivertest.InProcess(t, ctrdriver.New(drivertest.Logger(t)))
	ctx, cancel := testCtx()
	defer cancel()
	if err := d.SetConfig(ctx, &driverpb.PluginConfig{Values: pluginConfig(addr)}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{d: d, addr: addr, archive: imageArchive(t)}
	cfg := f.task(t, f.image("run"))
	ready := readyEnv(cfg)
	if _, err := d.StartTask(ctx, cfg); err != nil { // never destroyed, as by a failed test
		t.Fatal(err)
	}
	waitFile(t, ready)
	st, err := d.InspectTask(ctx, cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if len(shimsOf(t, addr)) == 0 {
		t.Fatalf("no shim with -address %s while a task runs", addr)
	}
	stop()
	stopped = true
	if pids := shimsOf(t, addr); len(pids) != 0 {
		t.Errorf("shims %v of the stopped containerd still run", pids)
	}
	waitGone(t, st.GetAttributes()["pid"])
}
