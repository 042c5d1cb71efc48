package execdriver

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/sdk/driverpb"
)

// TestSweepRemovesOnlyEmptyLeftoverCgroups: the start-up sweep removes a
// cgroup an earlier plugin process left empty under berth's parent, in
// every hierarchy, and leaves one with a process in it and one with a
// child cgroup. It runs on a parent of its own, not berth's.
func TestSweepRemovesOnlyEmptyLeftoverCgroups(t *testing.T) {
	testutil.RequireRoot(t, "creating cgroups")
	var logs bytes.Buffer
	d := New(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}))
	if d.detectErr != nil {
		testutil.Unavailable(t, "no usable cgroups: %v", d.detectErr)
	}
	c := d.cgroups
	parent := "/berth-sweep-test-" + strconv.Itoa(os.Getpid())
	dirs, err := c.parentDirs(parent)
	if err != nil {
		t.Fatal(err)
	}
	groups := []string{parent + "/left", parent + "/busy", parent + "/nested", parent + "/nested/child"}
	t.Cleanup(func() {
		for _, g := range slices.Backward(groups) {
			c.removeOnce(g)
		}
		for _, dir := range dirs {
			os.Remove(dir)
		}
	})
	var busyProcs []string
	for _, g := range groups {
		procs, err := c.createAt(g, &driverpb.Resources{})
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(g, "/busy") {
			busyProcs = procs
		}
	}
	sleeper := exec.Command("sleep", "1000")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sleeper.Process.Kill()
		sleeper.Wait()
	})
	for _, p := range busyProcs {
		if err := os.WriteFile(p, []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}

	// A cgroup made this recently may be a task's another agent is
	// starting: kept.
	d.sweepCgroups(parent, time.Hour)
	d.waitReleases()
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "left")); err != nil {
			t.Fatalf("%s/left: %v, want kept while younger than the sweep's minimum age", dir, err)
		}
	}

	d.sweepCgroups(parent, 0)
	d.waitReleases()

	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "left")); !os.IsNotExist(err) {
			t.Errorf("%s/left: %v, want removed", dir, err)
		}
		for _, kept := range []string{"busy", "nested", "nested/child"} {
			if _, err := os.Stat(filepath.Join(dir, kept)); err != nil {
				t.Errorf("%s/%s: %v, want kept", dir, kept, err)
			}
		}
	}
	if !strings.Contains(logs.String(), "left") || strings.Contains(logs.String(), "busy") {
		t.Errorf("log should name the removed cgroup only:\n%s", logs.String())
	}
}
