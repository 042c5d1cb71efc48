package hostvolumes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// restorePlugin answers create per volume: "slow" blocks until release
// is closed, "flaky" fails its first run, the others answer at once.
type restorePlugin struct {
	release chan struct{}
	flakyMu sync.Mutex
	flaky   int
}

func (p *restorePlugin) Create(ctx context.Context, req Request) (Result, error) {
	switch req.Name {
	case "slow":
		select {
		case <-p.release:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	case "flaky":
		p.flakyMu.Lock()
		defer p.flakyMu.Unlock()
		if p.flaky++; p.flaky == 1 {
			return Result{}, errors.New("not yet")
		}
	}
	return Result{Path: "/made/" + req.ID}, nil
}

func (p *restorePlugin) Delete(context.Context, Request) error { return nil }

// Restore does not hold the client's start for a slow plugin: volumes are
// restored in parallel, Restore returns at its deadline with the slow one
// not advertised, and that one (and one whose plugin failed, retried) is
// advertised, with Changed called, once restored in the background.
func TestRestoreIsParallelBoundedAndRetried(t *testing.T) {
	dir := t.TempDir()
	plugin := &restorePlugin{release: make(chan struct{})}
	var changes atomic.Int32
	cfg := Config{StateFile: filepath.Join(dir, "state.json"), VolumesDir: filepath.Join(dir, "vols"), NodeID: "node-1",
		RestoreWait: 300 * time.Millisecond, RestoreRetry: 20 * time.Millisecond, Changed: func() { changes.Add(1) }}
	build := func() *Manager {
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m.lookup = func(string) (Plugin, error) { return plugin, nil }
		return m
	}
	m := build()
	close(plugin.release)
	plugin.flaky = 1 // the first create succeeds
	for _, v := range []*pb.HostVolume{{Id: "a", Name: "slow", PluginId: "p"}, {Id: "b", Name: "flaky", PluginId: "p"}, {Id: "c", Name: "fast", PluginId: "p"}} {
		if _, _, err := m.Create(context.Background(), v); err != nil {
			t.Fatal(err)
		}
	}
	plugin.release = make(chan struct{}) // the restart's "slow" hangs
	plugin.flaky = 0
	changes.Store(0)

	m2 := build()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	err := m2.Restore(ctx)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Restore took %s", took)
	}
	if err == nil {
		t.Fatal("Restore with a volume still restoring answered no error")
	}
	got := m2.Volumes()
	if got["fast"].GetId() != "c" || got["slow"] != nil {
		t.Fatalf("advertised after Restore %v: want fast, not slow", got)
	}
	close(plugin.release)
	testutil.WaitFor(t, 10*time.Second, func() error {
		got := m2.Volumes()
		if got["slow"].GetId() != "a" || got["flaky"].GetId() != "b" || changes.Load() == 0 {
			return errors.New("slow and flaky not advertised yet")
		}
		return nil
	})
}

// Retain stops advertising a volume the servers do not hold (forgotten by
// a delete -force while the node was away), keeping its directory, and
// announces the change; a volume held again is advertised again.
func TestRetainHidesVolumesTheServersForgot(t *testing.T) {
	dir := t.TempDir()
	changes := 0
	m := newManager(t, dir, &changes)
	ctx := context.Background()
	for _, v := range []*pb.HostVolume{{Id: "v1", Name: "kept"}, {Id: "v2", Name: "forced"}} {
		if _, _, err := m.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	changes = 0
	m.Retain([]string{"v1"})
	if got := m.Volumes(); got["kept"].GetId() != "v1" || got["forced"] != nil || changes != 1 {
		t.Fatalf("after Retain(v1): %v, %d changes", got, changes)
	}
	if _, err := os.Stat(filepath.Join(dir, "vols", "v2")); err != nil {
		t.Fatalf("the forgotten volume's data: %v", err)
	}
	m.Retain([]string{"v1"})
	if changes != 1 {
		t.Fatalf("a Retain changing nothing announced a change")
	}
	m.Retain([]string{"v1", "v2"})
	if got := m.Volumes(); got["forced"].GetId() != "v2" || changes != 2 {
		t.Fatalf("after Retain(v1, v2): %v, %d changes", got, changes)
	}
}

// A new volume may take the name of one the servers no longer hold: the
// hidden one's record gives way (its data stays at its own path), so a
// name forced away while the node was gone is usable again.
func TestCreateTakesTheNameOfAForgottenVolume(t *testing.T) {
	dir := t.TempDir()
	changes := 0
	m := newManager(t, dir, &changes)
	ctx := context.Background()
	if _, _, err := m.Create(ctx, &pb.HostVolume{Id: "v1", Name: "data"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Create(ctx, &pb.HostVolume{Id: "v2", Name: "data"}); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("a second volume of a held name: %v, want ErrNameTaken", err)
	}
	m.Retain(nil)
	if _, _, err := m.Create(ctx, &pb.HostVolume{Id: "v2", Name: "data"}); err != nil {
		t.Fatalf("the name of a volume the servers forgot: %v", err)
	}
	if got := m.Volumes(); got["data"].GetId() != "v2" {
		t.Fatalf("volumes %v, want data = v2", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "vols", "v1")); err != nil {
		t.Fatalf("the forgotten volume's data: %v", err)
	}
	// A restarted manager restores only v2.
	m2 := newManager(t, dir, &changes)
	if err := m2.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if got := m2.Volumes(); len(got) != 1 || got["data"].GetId() != "v2" {
		t.Fatalf("after a restart: %v, want only data = v2", got)
	}
}
