package ctrdriver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/sdk"
)

// procStatus returns the line key of a running task's /proc/PID/status.
func procStatus(t *testing.T, d sdk.Driver, id, key string) string {
	t.Helper()
	ctx, cancel := testCtx()
	defer cancel()
	st, err := d.InspectTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(filepath.Join("/proc", st.GetAttributes()["pid"], "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range lines(string(status)) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/PID/status", key)
	return ""
}

// A container runs under Docker's default seccomp filter (mode 2), as
// Docker's; a privileged one runs without.
func TestSeccompDefaultProfile(t *testing.T) {
	f := newFixture(t)
	for _, privileged := range []bool{false, true} {
		dc := f.image("run")
		dc["privileged"] = sdk.BoolValue(privileged)
		cfg := f.task(t, dc)
		ready := readyEnv(cfg)
		f.start(t, cfg)
		waitFile(t, ready)
		want := "2"
		if privileged {
			want = "0"
		}
		if got := procStatus(t, f.d, cfg.GetId(), "Seccomp"); got != want {
			t.Errorf("privileged %v: Seccomp %s, want %s", privileged, got, want)
		}
	}
}
