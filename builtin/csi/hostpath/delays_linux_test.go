//go:build linux

package hostpath

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

const testVolID = "vol-0000000000000001deadbeef"

// delayServices builds node services with the given delays and a marker
// directory, outside any synctest bubble (they hold file locks).
func delayServices(t *testing.T, before, after map[string]time.Duration) (*Services, string) {
	t.Helper()
	markers := filepath.Join(t.TempDir(), "markers")
	s, err := NewServices(Config{StateDir: t.TempDir(), NodeID: "n1", Mode: ModeNode, Logger: testLogger(t, hclog.Info),
		DelayBefore: before, DelayAfter: after, DelayMarkerDir: markers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, markers
}

func markerFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func info(method string) *grpc.UnaryServerInfo {
	return &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Node/" + method}
}

// A delay before holds the call before its handler runs, leaves one marker
// naming method, volume and node as the hold starts, and then runs it.
func TestDelayBeforeHoldsTheCall(t *testing.T) {
	s, markers := delayServices(t, map[string]time.Duration{"NodeStageVolume": 3 * time.Second}, nil)
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Bool
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := s.delay(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: testVolID}, info("NodeStageVolume"),
				func(context.Context, any) (any, error) { ran.Store(true); return &csi.NodeStageVolumeResponse{}, nil })
			done <- err
		}()
		synctest.Wait()
		if ran.Load() {
			t.Fatal("NodeStageVolume ran before its delay")
		}
		names := markerFiles(t, markers)
		if len(names) != 1 || !strings.HasPrefix(names[0], "NodeStageVolume.before."+testVolID+".n1.") {
			t.Fatalf("markers %v, want one NodeStageVolume.before.%s.n1.*", names, testVolID)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !ran.Load() || time.Since(start) != 3*time.Second {
			t.Fatalf("ran %v after %s, want run after exactly 3s", ran.Load(), time.Since(start))
		}
		// A method without a delay passes straight through, no marker.
		_, err := s.delay(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: testVolID}, info("NodePublishVolume"),
			func(context.Context, any) (any, error) { return &csi.NodePublishVolumeResponse{}, nil })
		if err != nil || time.Since(start) != 3*time.Second || len(markerFiles(t, markers)) != 1 {
			t.Fatalf("undelayed call: %v after %s with %d markers", err, time.Since(start), len(markerFiles(t, markers)))
		}
	})
}

// A delay after runs the handler at once and holds its reply, handler's
// error included.
func TestDelayAfterHoldsTheReply(t *testing.T) {
	s, markers := delayServices(t, nil, map[string]time.Duration{"NodePublishVolume": 2 * time.Second})
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Bool
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := s.delay(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: "not-ours"}, info("NodePublishVolume"),
				func(context.Context, any) (any, error) { ran.Store(true); return nil, errHandler })
			done <- err
		}()
		synctest.Wait()
		if !ran.Load() {
			t.Fatal("NodePublishVolume did not run before its reply was held")
		}
		if names := markerFiles(t, markers); len(names) != 1 || !strings.HasPrefix(names[0], "NodePublishVolume.after.none.n1.") {
			t.Fatalf("markers %v, want one NodePublishVolume.after.none.n1.*", names)
		}
		select {
		case err := <-done:
			t.Fatalf("reply not held: %v", err)
		default:
		}
		err := <-done
		if err != errHandler || time.Since(start) != 2*time.Second {
			t.Fatalf("reply %v after %s, want the handler's error after 2s", err, time.Since(start))
		}
	})
}

var errHandler = errors.New("the handler failed")

// A caller that gives up ends the hold with its own cancellation, as a code,
// and a call held before never runs.
func TestDelayEndsWithTheCaller(t *testing.T) {
	s, _ := delayServices(t, map[string]time.Duration{"NodeStageVolume": time.Minute}, map[string]time.Duration{"NodeUnstageVolume": time.Minute})
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Bool
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := s.delay(ctx, &csi.NodeStageVolumeRequest{VolumeId: testVolID}, info("NodeStageVolume"),
				func(context.Context, any) (any, error) { ran.Store(true); return nil, nil })
			done <- err
		}()
		synctest.Wait()
		cancel()
		wantCode(t, <-done, codes.Canceled, "NodeStageVolume cancelled during its hold")
		if ran.Load() {
			t.Fatal("a call cancelled during its hold before ran anyway")
		}

		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		start := time.Now()
		_, err := s.delay(dctx, &csi.NodeUnstageVolumeRequest{VolumeId: testVolID}, info("NodeUnstageVolume"),
			func(context.Context, any) (any, error) { ran.Store(true); return &csi.NodeUnstageVolumeResponse{}, nil })
		wantCode(t, err, codes.DeadlineExceeded, "NodeUnstageVolume past its deadline during its hold")
		if !ran.Load() || time.Since(start) != 5*time.Second {
			t.Fatalf("ran %v, gave up after %s; want run and given up at the 5s deadline", ran.Load(), time.Since(start))
		}
	})
}

// Start installs the delay: a real call over the socket is held and leaves
// its marker.
func TestStartInstallsDelays(t *testing.T) {
	markers := filepath.Join(t.TempDir(), "markers")
	p := startPlugin(t, Config{StateDir: t.TempDir(), NodeID: "n1",
		DelayBefore: map[string]time.Duration{"Probe": 200 * time.Millisecond}, DelayMarkerDir: markers})
	start := time.Now()
	if _, err := p.ident.Probe(testCtx(t), &csi.ProbeRequest{}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("Probe answered in %s, want held at least 200ms", took)
	}
	if names := markerFiles(t, markers); len(names) != 1 || !strings.HasPrefix(names[0], "Probe.before.none.n1.") {
		t.Fatalf("markers %v, want one Probe.before.none.n1.*", names)
	}
	// Undelayed methods are not held and leave nothing.
	if _, err := p.ident.GetPluginInfo(testCtx(t), &csi.GetPluginInfoRequest{}); err != nil {
		t.Fatal(err)
	}
	if names := markerFiles(t, markers); len(names) != 1 {
		t.Fatalf("markers %v after an undelayed call, want still one", names)
	}
}
