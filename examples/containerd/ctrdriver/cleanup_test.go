package ctrdriver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"berth.dev/berth/sdk/driverpb"
)

// testImagePrefix starts the names of every image the tests import.
const testImagePrefix = "berth.test/"

// cleanSharedContainerd removes what the tests left in their namespace of
// a containerd they did not start (AddressEnv's, the system's say): the
// containers of their tasks and the images they imported, their content
// and snapshots going with them; the namespace itself goes when empty.
func cleanSharedContainerd(addr string) error {
	c, err := client.New(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = namespaces.WithNamespace(ctx, testNamespace)
	ctrs, err := c.Containers(ctx)
	if err != nil {
		return err
	}
	for _, ctr := range ctrs {
		if !strings.HasPrefix(ctr.ID(), "ctrd-test-") {
			continue
		}
		if proc, err := ctr.Task(ctx, nil); err == nil {
			proc.Delete(ctx, client.WithProcessKill)
		}
		ctr.Delete(ctx, client.WithSnapshotCleanup)
	}
	imgs, err := c.ImageService().List(ctx)
	if err != nil {
		return err
	}
	for _, img := range imgs {
		if strings.HasPrefix(img.Name, testImagePrefix) {
			if err := c.ImageService().Delete(ctx, img.Name, images.SynchronousDelete()); err != nil {
				return fmt.Errorf("delete image %s: %w", img.Name, err)
			}
		}
	}
	c.NamespaceService().Delete(ctx, testNamespace) // fails while others' things remain
	return nil
}

// cleanAfterTests is TestMain's clean-up of a shared containerd.
func cleanAfterTests() {
	if addr := os.Getenv(AddressEnv); addr != "" {
		if err := cleanSharedContainerd(addr); err != nil {
			fmt.Fprintf(os.Stderr, "removing the tests' images from %s: %v\n", addr, err)
		}
	}
}

// The clean-up of a shared containerd removes the images the tests
// imported, and the snapshots of their layers.
func TestCleanSharedContainerdRemovesTheTestImages(t *testing.T) {
	f := newFixture(t)
	f.runOutput(t, f.task(t, f.image("exit", "0"))) // imports the test image
	c, cctx := containerdClient(t, f.addr)
	if _, err := c.GetImage(cctx, testImage); err != nil {
		t.Fatalf("test image after a run: %v", err)
	}
	if err := cleanSharedContainerd(f.addr); err != nil {
		t.Fatal(err)
	}
	imgs, err := c.ImageService().List(cctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if strings.HasPrefix(img.Name, testImagePrefix) {
			t.Errorf("image %s left", img.Name)
		}
	}
	n := 0
	if err := c.SnapshotService("overlayfs").Walk(cctx, func(context.Context, snapshots.Info) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d snapshots left in %s", n, testNamespace)
	}
}

// A task given no task or log directory keeps its logs and FIFOs in
// scratch directories under the temp dir, removed with the task.
func TestScratchDirectoriesGoWithTheTask(t *testing.T) {
	f := newFixture(t)
	cfg := &driverpb.TaskConfig{Id: fmt.Sprintf("ctrd-test-%d-scratch", os.Getpid()), Name: "scratch",
		DriverConfig: f.image("echo", "out", "err"), Resources: &driverpb.Resources{MemoryBytes: 64 << 20}}
	res := f.run(t, cfg)
	if res.GetExitCode() != 0 {
		t.Fatalf("task exited %v", res)
	}
	logs := filepath.Join(os.TempDir(), "berth-containerd-logs", cfg.GetId())
	fifos := filepath.Join(os.TempDir(), "berth-containerd-io", cfg.GetId())
	if _, err := os.Stat(logs); err != nil {
		t.Fatalf("scratch log dir while the task is there: %v", err)
	}
	ctx, cancel := testCtx()
	defer cancel()
	if err := f.d.DestroyTask(ctx, cfg.GetId(), true); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{logs, fifos} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s after DestroyTask: %v, want it gone", dir, err)
		}
	}
}
