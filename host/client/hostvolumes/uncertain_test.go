package hostvolumes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// A plugin killed because the caller's deadline passed or the caller gave
// up may have acted: its error has an uncertain code (DeadlineExceeded,
// Canceled), not the certain Internal of a plugin that answered a failure.
func TestPluginInterruptedIsUncertain(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	e := writePlugin(t, dir, "touch "+started+"\nsleep 600 &\nwait\n")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := e.Create(ctx, Request{ID: "v1", Name: "n"})
	if !errors.Is(err, ErrPluginTimeout) || errcode.Code(err) != codes.DeadlineExceeded || !errcode.Uncertain.Has(errcode.Code(err)) {
		t.Fatalf("the caller's deadline: %v (code %v)", err, errcode.Code(err))
	}
	ctx, cancel = context.WithCancel(context.Background())
	_ = os.Remove(started)
	done := make(chan error, 1)
	go func() {
		_, err := e.Create(ctx, Request{ID: "v1", Name: "n"})
		done <- err
	}()
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the plugin ended before the cancel: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, ErrPluginCanceled) || errcode.Code(err) != codes.Canceled {
		t.Fatalf("the caller's cancel: %v (code %v)", err, errcode.Code(err))
	}
}

// A volume made whose record could not be written (host_volumes.json) is
// an uncertain outcome (Aborted), so the servers keep it and ask again;
// the node does not advertise it.
func TestCreateNotRecordedIsUncertain(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{StateFile: filepath.Join(dir, "state.json"), VolumesDir: filepath.Join(dir, "vols"), NodeID: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	m.cfg.StateFile = filepath.Join(dir, "file", "state.json") // cannot be written
	_, _, err = m.Create(context.Background(), &pb.HostVolume{Id: "v1", Name: "data"})
	if !errors.Is(err, ErrNotRecorded) || errcode.Code(err) != codes.Aborted || !errcode.Uncertain.Has(errcode.Code(err)) {
		t.Fatalf("a create not recorded: %v (code %v)", err, errcode.Code(err))
	}
	if len(m.Volumes()) != 0 {
		t.Fatalf("advertised %v", m.Volumes())
	}
}
