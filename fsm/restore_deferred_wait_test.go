package fsm_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// A raft snapshot taken while a deferred restore decodes waits for it and
// holds the restored rows, not the replaced store's.
func TestDeferredRestoreSnapshotWaits(t *testing.T) {
	snap := deferredSource(t, 50)
	synctest.Test(t, func(t *testing.T) {
		f := fsm.New(nil)
		applyOK(t, f, 1, fsm.NodeRegister, registerCmd("old", "old", pb.NodeStatus_NODE_STATUS_READY))
		f.DeferRestores(true)
		release := make(chan struct{})
		fsm.SetDeferredRestoreHooks(f, func() { <-release }, func(err error) { t.Errorf("deferred restore failed: %v", err) })
		if err := restoreBytes(f, snap); err != nil {
			t.Fatal(err)
		}
		taken := make(chan []byte, 1)
		go func() { taken <- snapshotBytes(t, f) }()
		synctest.Wait()
		select {
		case <-taken:
			t.Fatal("Snapshot returned while the restore was decoding")
		default:
		}
		close(release)
		g := fsm.New(nil)
		if err := restoreBytes(g, <-taken); err != nil {
			t.Fatal(err)
		}
		if got := nodeCount(t, g.State()); got != 50 {
			t.Fatalf("the snapshot taken during the decoding holds %d nodes, want the restored 50", got)
		}
	})
}

// A second restore waits for a first still decoding, so the first's
// store is never swapped in over the second's.
func TestDeferredRestoreSecondRestoreWaits(t *testing.T) {
	first, second := deferredSource(t, 30), deferredSource(t, 20)
	synctest.Test(t, func(t *testing.T) {
		f := fsm.New(nil)
		f.DeferRestores(true)
		release := make(chan struct{})
		var calls atomic.Int32
		fsm.SetDeferredRestoreHooks(f, func() {
			if calls.Add(1) == 1 {
				<-release
			}
		}, func(err error) { t.Errorf("deferred restore failed: %v", err) })
		if err := restoreBytes(f, first); err != nil {
			t.Fatal(err)
		}
		returned := make(chan error, 1)
		go func() { returned <- restoreBytes(f, second) }()
		synctest.Wait()
		select {
		case <-returned:
			t.Fatal("a second Restore returned while the first was decoding")
		default:
		}
		close(release)
		if err := <-returned; err != nil {
			t.Fatal(err)
		}
		if !f.WaitRestored(context.Background()) {
			t.Fatal("WaitRestored = false")
		}
		if got := nodeCount(t, f.State()); got != 20 {
			t.Fatalf("after both restores: %d nodes, want the second's 20", got)
		}
	})
}

// A decoding that fails once the FSM is closed (the server shutting down)
// is only logged: it does not end the process, and its waiters are let
// go with the error.
func TestDeferredRestoreFailingAfterCloseIsOnlyLogged(t *testing.T) {
	bad := v2(t, &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Row{Row: &pb.TableRow{Table: fsm.TableNodes, Row: []byte{0xff, 0xff, 0xff}}}})
	synctest.Test(t, func(t *testing.T) {
		f := fsm.New(nil)
		f.DeferRestores(true)
		release := make(chan struct{})
		fsm.SetDeferredRestoreHooks(f, func() { <-release }, func(err error) {
			t.Errorf("a decoding failing after Close was handled as fatal: %v", err)
		})
		if err := restoreBytes(f, bad); err != nil {
			t.Fatal(err)
		}
		f.Close()
		close(release)
		if f.WaitRestored(context.Background()) {
			t.Fatal("WaitRestored = true after the decoding failed")
		}
	})
}

// A deferred restore reads its stream in fixed pieces: the bytes it
// allocates before returning stay near the stream's size (io.ReadAll's
// growing buffer allocated several times it).
func TestDeferredRestoreBuffersWithoutRegrowing(t *testing.T) {
	snap := deferredSource(t, 60000)
	if len(snap) < 2<<20 {
		t.Fatalf("the snapshot is %d bytes, want a few MiB", len(snap))
	}
	f := fsm.New(nil)
	f.DeferRestores(true)
	release := make(chan struct{})
	// The held decode is let go and waited for, so its allocations do not
	// land in a later test's measurement (TestOfferedRestoreDoesNotHoldTheStream).
	defer func() {
		close(release)
		if !f.WaitRestored(t.Context()) {
			t.Error("the released decode did not finish")
		}
	}()
	fsm.SetDeferredRestoreHooks(f, func() { <-release }, nil)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := restoreBytes(f, snap); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	// The stream, rounded up to whole pieces, plus the framing check's
	// buffers.
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(len(snap))+5<<18; got > limit {
		t.Fatalf("Restore allocated %d bytes for a %d-byte stream, want at most %d", got, len(snap), limit)
	}
}
