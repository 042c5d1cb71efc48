package hostvolumes

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"berth.dev/berth/rpc/pb"
)

// blockingPlugin's Create waits until release is closed; started says it
// began.
type blockingPlugin struct {
	started chan string
	release chan struct{}
}

func (b *blockingPlugin) Create(ctx context.Context, req Request) (Result, error) {
	b.started <- req.ID
	select {
	case <-b.release:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	return Result{Path: req.Path}, nil
}

func (b *blockingPlugin) Delete(context.Context, Request) error { return nil }

// within fails the test when f does not return in a bound far above what
// it needs (it would otherwise hang until the test binary's timeout).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s waited for a running plugin", what)
	}
}

// A plugin that takes long stalls neither Volumes (the heartbeat's
// re-registration) nor an operation on another volume; one on the same
// volume waits for it.
func TestPluginRunHoldsNoManagerLock(t *testing.T) {
	dir := t.TempDir()
	changes := 0
	m := newManager(t, dir, &changes)
	slow := &blockingPlugin{started: make(chan string, 2), release: make(chan struct{})}
	m.lookup = func(id string) (Plugin, error) {
		if id == "slow" {
			return slow, nil
		}
		return lookupPlugin(id, "", filepath.Join(dir, "vols"))
	}
	errc := make(chan error, 1)
	go func() {
		_, _, err := m.Create(context.Background(), &pb.HostVolume{Id: "v1", Name: "slow", PluginId: "slow"})
		errc <- err
	}()
	<-slow.started
	within(t, "Volumes", func() { m.Volumes() })
	within(t, "a create of another volume", func() {
		if _, _, err := m.Create(context.Background(), &pb.HostVolume{Id: "v2", Name: "other"}); err != nil {
			t.Error(err)
		}
	})
	// The same name waits for the running create, until its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := m.Create(ctx, &pb.HostVolume{Id: "v3", Name: "slow"}); err == nil {
		t.Error("a create of a name being made did not wait")
	}
	close(slow.release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := m.Volumes(); got["slow"].GetId() != "v1" || got["other"].GetId() != "v2" {
		t.Errorf("volumes %v", got)
	}
}
