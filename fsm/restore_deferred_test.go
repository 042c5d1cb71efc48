package fsm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// deferredSource is an FSM holding n nodes and its snapshot stream.
func deferredSource(t *testing.T, n int) []byte {
	t.Helper()
	f := fsm.New(nil)
	for i := range n {
		applyOK(t, f, uint64(i+1), fsm.NodeRegister,
			registerCmd(fmt.Sprintf("id-%04d", i), fmt.Sprintf("n%d", i), pb.NodeStatus_NODE_STATUS_READY))
	}
	return snapshotBytes(t, f)
}

func nodeCount(t *testing.T, st *fsm.StateStore) int {
	t.Helper()
	nodes, err := st.Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	return len(nodes)
}

// With DeferRestores on, Restore returns (raft answers the leader's
// InstallSnapshot) before the rows are decoded. Meanwhile readers read the
// replaced store (never blocked), and the applies and WaitRestored (a new
// leader's start) wait for the restored one.
func TestDeferredRestoreReturnsBeforeTheRowsAreDecoded(t *testing.T) {
	// Many times bufio's 4 KiB: the framing check walks the whole stream.
	snap := deferredSource(t, 500)
	if len(snap) < 16<<10 {
		t.Fatalf("the snapshot is %d bytes, want several buffers", len(snap))
	}
	synctest.Test(t, func(t *testing.T) {
		f := fsm.New(nil)
		applyOK(t, f, 1, fsm.NodeRegister, registerCmd("old", "old", pb.NodeStatus_NODE_STATUS_READY))
		f.DeferRestores(true)
		release := make(chan struct{})
		decoding := false
		fsm.SetDeferredRestoreHooks(f, func() { decoding = true; <-release }, func(err error) { t.Errorf("deferred restore failed: %v", err) })
		restored := make(chan error, 1)
		go func() { restored <- restoreBytes(f, snap) }()
		synctest.Wait()
		select {
		case err := <-restored:
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
		default:
			t.Fatal("Restore has not returned while the rows wait to be decoded")
		}
		if !decoding {
			t.Fatal("the decoding did not start")
		}
		if got := nodeCount(t, f.State()); got != 1 {
			t.Fatalf("State while decoding holds %d nodes, want the replaced store's 1", got)
		}
		waited := make(chan bool, 1)
		go func() { waited <- f.WaitRestored(context.Background()) }()
		entry := mustEncode(t, fsm.NodeRegister, registerCmd("id-new", "new", pb.NodeStatus_NODE_STATUS_READY))
		applied := make(chan struct{})
		go func() {
			defer close(applied)
			if res := applyAt(f, 1000, entry); res.Err != nil {
				t.Errorf("apply after the restore: %v", res.Err)
			}
		}()
		gaveUp, cancel := context.WithCancel(context.Background())
		cancelled := make(chan bool, 1)
		go func() { cancelled <- f.WaitRestored(gaveUp) }()
		cancel()
		synctest.Wait()
		if <-cancelled {
			t.Fatal("WaitRestored reported the restore done when its context ended first")
		}
		select {
		case <-waited:
			t.Fatal("WaitRestored returned before the rows were decoded")
		case <-applied:
			t.Fatal("an apply ran before the restored rows were decoded")
		default:
		}
		close(release)
		synctest.Wait()
		if !<-waited {
			t.Fatal("WaitRestored = false after the decoding")
		}
		<-applied
		// The apply ran on the restored store, not the replaced one.
		if got := nodeCount(t, f.State()); got != 501 {
			t.Fatalf("after the decoding and an apply: %d nodes, want the snapshot's 500 and the new one", got)
		}
	})
}

// What a truncated or foreign stream breaks is still refused by Restore
// itself (raft then retries the install), with the state unchanged and no
// decoding started.
func TestDeferredRestoreRefusesABrokenStreamAtOnce(t *testing.T) {
	snap := deferredSource(t, 300)
	cases := map[string][]byte{
		"truncated":     snap[:len(snap)-3],
		"end cut off":   snap[:len(snap)-4],
		"newer version": stream(t, &pb.SnapshotHeader{Version: fsm.SnapshotVersion + 1}, endRec(0)),
		"no end record": stream(t, &pb.SnapshotHeader{Version: 2}, indexRec(fsm.TableNodes, 3)),
		"end miscounts": stream(t, &pb.SnapshotHeader{Version: 2}, indexRec(fsm.TableNodes, 3), endRec(2)),
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			f := fsm.New(nil)
			applyOK(t, f, 1, fsm.NodeRegister, registerCmd("keep", "keep", pb.NodeStatus_NODE_STATUS_READY))
			f.DeferRestores(true)
			fsm.SetDeferredRestoreHooks(f, func() { t.Error("a broken stream was handed to the deferred decoding") }, nil)
			err := restoreBytes(f, s)
			if !errors.Is(err, fsm.ErrSnapshotCorrupt) && !errors.Is(err, fsm.ErrSnapshotVersion) {
				t.Fatalf("Restore = %v, want a corrupt or version error", err)
			}
			if got := nodeCount(t, f.State()); got != 1 {
				t.Fatalf("state after the refusal holds %d nodes, want the 1 it had", got)
			}
		})
	}
}

// A row that only the decoding finds broken ends the server (the hook
// stands in for the end), the state left as it was. What waited for the
// decoding (a raft snapshot) is not let go onto the replaced store while
// it fails, and after it (under the hook) it refuses: a snapshot then
// would pair raft's installed index with the old rows.
func TestDeferredRestoreThatFailsToDecodeStops(t *testing.T) {
	bad := v2(t, &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Row{Row: &pb.TableRow{Table: fsm.TableNodes, Row: []byte{0xff, 0xff, 0xff}}}})
	f := fsm.New(nil)
	applyOK(t, f, 1, fsm.NodeRegister, registerCmd("keep", "keep", pb.NodeStatus_NODE_STATUS_READY))
	f.DeferRestores(true)
	release := make(chan struct{})
	failed := make(chan error, 1)
	snapshotted := make(chan error, 1)
	fsm.SetDeferredRestoreHooks(f, func() { <-release }, func(err error) {
		select {
		case err := <-snapshotted:
			t.Errorf("a snapshot waiting for the decoding returned (%v) before its failure was handled", err)
		default:
		}
		failed <- err
	})
	if err := restoreBytes(f, bad); err != nil {
		t.Fatalf("Restore = %v, want nil (the framing is whole; the row is decoded after)", err)
	}
	go func() {
		snap, err := f.Snapshot()
		if err == nil {
			snap.Release()
		}
		snapshotted <- err
	}()
	close(release)
	select {
	case err := <-failed:
		if !errors.Is(err, fsm.ErrSnapshotCorrupt) {
			t.Fatalf("the decoding failed with %v, want ErrSnapshotCorrupt", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the decoding's failure was not reported within a minute")
	}
	select {
	case err := <-snapshotted:
		if err == nil {
			t.Fatal("Snapshot after the failed decoding succeeded on the replaced store")
		}
	case <-time.After(time.Minute):
		t.Fatal("Snapshot still waiting a minute after the failure was handled")
	}
	if f.WaitRestored(context.Background()) {
		t.Fatal("WaitRestored = true after the decoding failed")
	}
	if got := nodeCount(t, f.State()); got != 1 {
		t.Fatalf("state after the failed decoding holds %d nodes, want the 1 it had", got)
	}
}

// A stream over the bound, and every restore without DeferRestores, is
// decoded before Restore returns.
func TestRestoreDecodesAtOnceWhenNotDeferred(t *testing.T) {
	snap := deferredSource(t, 10)
	for name, setup := range map[string]func(f *fsm.FSM) func(){
		"not deferring": func(f *fsm.FSM) func() { return func() {} },
		"over the bound": func(f *fsm.FSM) func() {
			f.DeferRestores(true)
			return fsm.SetMaxDeferredRestore(int64(len(snap) - 1))
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := fsm.New(nil)
			defer setup(f)()
			fsm.SetDeferredRestoreHooks(f, func() { t.Error("decoding deferred") }, nil)
			if err := restoreBytes(f, snap); err != nil {
				t.Fatal(err)
			}
			if got := nodeCount(t, f.State()); got != 10 {
				t.Fatalf("%d nodes after Restore, want 10", got)
			}
		})
	}
}

// A restore offered a checked store (the leader's, of an operator's
// upload) that reads another stream decodes it before returning even
// with DeferRestores on: its caller reads the restored state once raft's
// restore returns.
func TestRestoreOfferedAnotherStreamIsNotDeferred(t *testing.T) {
	offered, other := deferredSource(t, 5), deferredSource(t, 7)
	f := fsm.New(nil)
	f.DeferRestores(true)
	fsm.SetDeferredRestoreHooks(f, func() { t.Error("the restore of another stream than the offered one was deferred") }, nil)
	c, err := f.CheckSnapshot(bytes.NewReader(offered), int64(len(offered)))
	if err != nil {
		t.Fatal(err)
	}
	f.OfferRestore(c)
	if err := restoreBytes(f, other); err != nil {
		t.Fatal(err)
	}
	if got := nodeCount(t, f.State()); got != 7 {
		t.Fatalf("%d nodes once Restore returned, want the other stream's 7", got)
	}
}
