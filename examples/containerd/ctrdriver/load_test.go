package ctrdriver_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/sdk"
)

// An archive holding one image under another name does not retag a name
// that already names another image: one job's archive would replace it
// for every task of the namespace.
func TestLoadDoesNotRetagAnotherImage(t *testing.T) {
	f := newFixture(t)
	imageArchive(t) // builds testLayer
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first.tar"), filepath.Join(dir, "second.tar")
	if err := writeOCIArchive(first, "berth.test/first-name:1", testLayer, testDiffID, []string{"/taskprog"}, []string{"exit", "9"}); err != nil {
		t.Fatal(err)
	}
	if err := writeOCIArchive(second, "berth.test/second-name:1", testLayer, testDiffID, []string{"/taskprog"}, []string{"exit", "8"}); err != nil {
		t.Fatal(err)
	}
	const taken = "berth.test/taken:1"
	if res := f.run(t, f.task(t, sdk.ConfigMap{"image": sdk.StringValue(taken), "load": sdk.StringValue(first)})); res.GetExitCode() != 9 {
		t.Fatalf("task of the first archive exited %v, want 9", res)
	}
	ctx, cancel := testCtx()
	defer cancel()
	_, err := f.d.StartTask(ctx, f.task(t, sdk.ConfigMap{"image": sdk.StringValue(taken), "load": sdk.StringValue(second)}))
	var se *sdk.StartError
	if !errors.As(err, &se) || se.Path != second || !strings.Contains(se.Detail, taken) {
		t.Fatalf("load of another image under a taken name: %v, want a StartError naming the archive and %s", err, taken)
	}
	if res := f.run(t, f.task(t, sdk.ConfigMap{"image": sdk.StringValue(taken)})); res.GetExitCode() != 9 {
		t.Errorf("%s after the refused load exited %v, want 9 (the first archive's image)", taken, res)
	}
}
