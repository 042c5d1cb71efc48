package csi_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
)

// TestCallTableCoversEveryCallCase: allCalls, which the other tests run
// every call from, has a case for every row of the call table.
func TestCallTableCoversEveryCallCase(t *testing.T) {
	seen := map[csi.Call]bool{}
	for _, cc := range allCalls(csifake.New()) {
		seen[cc.call] = true
	}
	for _, r := range csi.Calls() {
		if !seen[r.Call] {
			t.Errorf("call %s is in the call table but has no test case", r.Call)
		}
	}
	if len(seen) != len(csi.Calls()) {
		t.Errorf("%d calls tested, the call table has %d", len(seen), len(csi.Calls()))
	}
}

// TestDeadlinesFire blocks every call in the plugin and checks that each
// call's own deadline ends it, without any deadline on the caller's context.
func TestDeadlinesFire(t *testing.T) {
	const deadline = 100 * time.Millisecond
	timeouts := csi.Timeouts{}
	for call := range csi.DefaultTimeouts() {
		timeouts[call] = deadline
	}
	p, _, c := startFake(t, csi.WithTimeouts(timeouts))
	// Connect before anything blocks, so the deadlines are spent waiting on
	// the plugin rather than on dialing.
	if _, err := c.Identity.GetPluginInfo(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for _, cc := range allCalls(p) {
		t.Run(string(cc.call), func(t *testing.T) {
			t.Parallel()
			before := cc.count()
			release := cc.block()
			defer release()
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- cc.do(context.Background(), c) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatalf("%s did not return a minute after its %v deadline", cc.call, deadline)
			}
			if elapsed := time.Since(start); elapsed < deadline {
				t.Errorf("returned after %v, before its deadline %v", elapsed, deadline)
			}
			var e *csi.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not a *csi.Error", err, err)
			}
			if e.Code != codes.DeadlineExceeded || e.Call != cc.call || e.VolumeID != cc.volume {
				t.Errorf("got call=%s volume=%q code=%s, want call=%s volume=%q code=DeadlineExceeded",
					e.Call, e.VolumeID, e.Code, cc.call, cc.volume)
			}
			if !csi.IsUncertain(err) || csi.IsFinal(err) {
				t.Errorf("a deadline must be uncertain: %v", err)
			}
			// On a loaded machine the deadline may pass before the call
			// reaches the plugin; it must never have been answered twice.
			if n := cc.count() - before; n > 1 {
				t.Errorf("plugin saw %d calls, want at most 1", n)
			}
		})
	}
}

// TestCallerDeadlineWins checks a sooner deadline on the caller's context
// cuts a call whose own deadline is long.
func TestCallerDeadlineWins(t *testing.T) {
	p, _, c := startFake(t)
	release := p.NodeStageVolume.Block()
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v1", StagingTargetPath: "/s", VolumeCapability: rwCap})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
}

var allCodes = []codes.Code{
	codes.Canceled, codes.Unknown, codes.InvalidArgument, codes.DeadlineExceeded, codes.NotFound,
	codes.AlreadyExists, codes.PermissionDenied, codes.ResourceExhausted, codes.FailedPrecondition,
	codes.Aborted, codes.OutOfRange, codes.Unimplemented, codes.Internal, codes.Unavailable,
	codes.DataLoss, codes.Unauthenticated,
}

var uncertainCodes = map[codes.Code]bool{
	codes.Canceled: true, codes.DeadlineExceeded: true, codes.Unavailable: true,
	codes.ResourceExhausted: true, codes.Aborted: true,
}

// TestErrorClassification returns every gRPC code from every call and checks
// the class, the code, the call and the volume the error carries, and that
// NotFound on the undo calls is success.
func TestErrorClassification(t *testing.T) {
	p, _, c := startFake(t)
	ctx := testCtx(t)
	for _, cc := range allCalls(p) {
		for _, code := range allCodes {
			// The fake stays up, so Unavailable is the plugin's own answer
			// and must not be taken for a shutdown.
			cc.fail(status.Error(code, "scripted "+code.String()))
			err := cc.do(ctx, c)
			if code == codes.NotFound && undoCalls[cc.call] {
				if err != nil {
					t.Errorf("%s: NotFound must be success, got %v", cc.call, err)
				}
				continue
			}
			var e *csi.Error
			if !errors.As(err, &e) {
				t.Errorf("%s/%s: error %v (%T) is not a *csi.Error", cc.call, code, err, err)
				continue
			}
			if e.Code != code || e.Call != cc.call || e.VolumeID != cc.volume || e.Message != "scripted "+code.String() {
				t.Errorf("%s/%s: got call=%s volume=%q code=%s message=%q", cc.call, code, e.Call, e.VolumeID, e.Code, e.Message)
			}
			if got := csi.IsUncertain(err); got != uncertainCodes[code] {
				t.Errorf("%s/%s: IsUncertain = %v, want %v", cc.call, code, got, uncertainCodes[code])
			}
			if csi.IsFinal(err) == csi.IsUncertain(err) {
				t.Errorf("%s/%s: IsFinal and IsUncertain agree", cc.call, code)
			}
			if errors.Is(err, csi.ErrPluginShutdown) {
				t.Errorf("%s/%s: a live plugin's error taken for a shutdown", cc.call, code)
			}
			// The code survives wrapping and crossing a gRPC boundary.
			if got := status.Code(fmt.Errorf("attach: %w", err)); got != code {
				t.Errorf("%s/%s: status.Code through wrapping = %s", cc.call, code, got)
			}
		}
	}
}

func TestClassifyPlainErrors(t *testing.T) {
	cases := []struct {
		err       error
		uncertain bool
	}{
		{nil, false},
		{context.Canceled, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("x: %w", csi.ErrPluginShutdown), true},
		{status.Error(codes.Aborted, "x"), true},
		{status.Error(codes.FailedPrecondition, "x"), false},
		{errors.New("plain"), false},
	}
	for _, tc := range cases {
		if got := csi.IsUncertain(tc.err); got != tc.uncertain {
			t.Errorf("IsUncertain(%v) = %v, want %v", tc.err, got, tc.uncertain)
		}
		if got := csi.IsFinal(tc.err); got != (tc.err != nil && !tc.uncertain) {
			t.Errorf("IsFinal(%v) = %v", tc.err, got)
		}
	}
}

// TestNotFoundIsFinalElsewhere: NotFound is success only for undo calls.
func TestNotFoundIsFinalElsewhere(t *testing.T) {
	p, _, c := startFake(t)
	p.NodeStageVolume.Next(nil, status.Error(codes.NotFound, "no volume v1"))
	_, err := c.Node.NodeStageVolume(testCtx(t), &csipb.NodeStageVolumeRequest{VolumeId: "v1", StagingTargetPath: "/s", VolumeCapability: rwCap})
	if !csi.IsFinal(err) || !csi.IsNotFound(err) {
		t.Fatalf("NodeStageVolume NotFound: got %v, want a final NotFound", err)
	}
	want := `csi NodeStageVolume volume "v1": NotFound: no volume v1`
	if err.Error() != want {
		t.Errorf("error text %q, want %q", err.Error(), want)
	}
}

func TestPluginShutdownSocketGone(t *testing.T) {
	_, srv, c := startFake(t)
	ctx := testCtx(t)
	if _, err := c.Identity.Probe(ctx); err != nil {
		t.Fatalf("probe of a live plugin: %v", err)
	}
	srv.Stop()
	_, err := c.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "v1", TargetPath: "/t"})
	assertShutdown(t, err, csi.CallNodeUnpublishVolume, "v1")
	_, err = c.Identity.Probe(ctx)
	assertShutdown(t, err, csi.CallProbe, "")
}

func TestPluginShutdownConnectionRefused(t *testing.T) {
	// A plugin killed hard leaves its socket file behind with nobody listening.
	path := filepath.Join(socketDir(t), "csi.sock")
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	lis.SetUnlinkOnClose(false)
	lis.Close()
	c, err := csi.Dial("unix://"+path, csi.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Identity.Probe(testCtx(t))
	assertShutdown(t, err, csi.CallProbe, "")
}

func TestPluginShutdownMidCall(t *testing.T) {
	p, srv, c := startFake(t)
	release := p.NodeStageVolume.Block()
	defer release()
	done := make(chan error, 1)
	go func() {
		_, err := c.Node.NodeStageVolume(testCtx(t), &csipb.NodeStageVolumeRequest{VolumeId: "v1", StagingTargetPath: "/s", VolumeCapability: rwCap})
		done <- err
	}()
	waitFor(t, func() bool { return p.NodeStageVolume.Count() == 1 })
	srv.Stop()
	assertShutdown(t, <-done, csi.CallNodeStageVolume, "v1")
}

func TestPluginRestartRecovers(t *testing.T) {
	p, srv, c := startFake(t)
	ctx := testCtx(t)
	srv.Stop()
	if _, err := c.Identity.Probe(ctx); !errors.Is(err, csi.ErrPluginShutdown) {
		t.Fatalf("probe of a stopped plugin: got %v", err)
	}
	srv2, err := p.Listen(srv.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Stop()
	// The first calls may still meet the old connection's backoff; a
	// restarted local plugin must be reachable again well within a minute.
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r := csi.Retry{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Logger: testLogger(t)}
	err = r.Do(rctx, csi.CallProbe, "", func(ctx context.Context) error {
		_, err := c.Identity.Probe(ctx)
		return err
	})
	if err != nil {
		t.Fatalf("client did not reach the restarted plugin: %v", err)
	}
}

func TestUnavailableWithoutShutdownCheck(t *testing.T) {
	// A connection made by the caller: without a shutdown check the client
	// cannot tell a dead plugin and reports plain Unavailable.
	path := filepath.Join(socketDir(t), "missing.sock")
	cc, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := testCtx(t)

	_, err = csi.New(cc).Identity.Probe(ctx)
	if status.Code(err) != codes.Unavailable || errors.Is(err, csi.ErrPluginShutdown) || !csi.IsUncertain(err) {
		t.Fatalf("got %v, want a plain uncertain Unavailable", err)
	}
	exited := errors.New("plugin process exited with status 2")
	_, err = csi.New(cc, csi.WithShutdownCheck(func() error { return exited })).Identity.Probe(ctx)
	if !errors.Is(err, csi.ErrPluginShutdown) || !errors.Is(err, exited) {
		t.Fatalf("got %v, want ErrPluginShutdown wrapping the check's reason", err)
	}
}

func assertShutdown(t *testing.T, err error, call csi.Call, volume string) {
	t.Helper()
	var e *csi.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *csi.Error", err, err)
	}
	if !errors.Is(err, csi.ErrPluginShutdown) {
		t.Errorf("%v: not ErrPluginShutdown", err)
	}
	if e.Call != call || e.VolumeID != volume || e.Code != codes.Unavailable {
		t.Errorf("got call=%s volume=%q code=%s, want %s %q Unavailable", e.Call, e.VolumeID, e.Code, call, volume)
	}
	if !csi.IsUncertain(err) {
		t.Errorf("a shutdown must be uncertain: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestInvalidRequestsNotSent checks missing required fields are refused
// before the call reaches the plugin.
func TestInvalidRequestsNotSent(t *testing.T) {
	p, _, c := startFake(t)
	ctx := testCtx(t)
	_, err := c.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v1"})
	if !errors.Is(err, csi.ErrInvalidRequest) || status.Code(err) != codes.InvalidArgument || !csi.IsFinal(err) {
		t.Fatalf("got %v, want a final ErrInvalidRequest", err)
	}
	want := `csi NodeStageVolume volume "v1": invalid csi request: missing staging_target_path, volume_capability`
	if err.Error() != want {
		t.Errorf("error text %q, want %q", err.Error(), want)
	}
	_, err = c.Controller.DeleteVolume(ctx, nil)
	if !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("DeleteVolume(nil): got %v", err)
	}
	if n := p.NodeStageVolume.Count() + p.DeleteVolume.Count(); n != 0 {
		t.Errorf("plugin saw %d invalid requests", n)
	}
}

func TestInvalidResponses(t *testing.T) {
	p, _, c := startFake(t)
	ctx := testCtx(t)
	p.GetPluginInfo.Next(&csipb.GetPluginInfoResponse{VendorVersion: "1"}, nil)
	p.NodeGetInfo.Next(&csipb.NodeGetInfoResponse{}, nil)
	p.CreateVolume.Next(&csipb.CreateVolumeResponse{}, nil)
	checks := []struct {
		call csi.Call
		err  error
	}{
		{csi.CallGetPluginInfo, func() error { _, err := c.Identity.GetPluginInfo(ctx); return err }()},
		{csi.CallNodeGetInfo, func() error { _, err := c.Node.NodeGetInfo(ctx); return err }()},
		{csi.CallCreateVolume, func() error {
			_, err := c.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "v1", VolumeCapabilities: []*csipb.VolumeCapability{rwCap}})
			return err
		}()},
	}
	for _, ch := range checks {
		var e *csi.Error
		if !errors.As(ch.err, &e) || e.Call != ch.call || !errors.Is(ch.err, csi.ErrInvalidResponse) || !csi.IsFinal(ch.err) {
			t.Errorf("%s: got %v, want a final ErrInvalidResponse", ch.call, ch.err)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	long := "/" + strings.Repeat("a", 120)
	cases := []struct {
		in, want string
		ok       bool
	}{
		{"unix:///run/csi/csi.sock", "/run/csi/csi.sock", true},
		{"unix:/run/csi/csi.sock", "/run/csi/csi.sock", true},
		{"/run/csi//csi.sock", "/run/csi/csi.sock", true},
		{"unix://run/csi.sock", "", false},
		{"tcp://127.0.0.1:9000", "", false},
		{"csi.sock", "", false},
		{"unix://", "", false},
		{"", "", false},
		{long, "", false},
	}
	for _, tc := range cases {
		got, err := csi.ParseEndpoint(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, csi.ErrInvalidEndpoint) {
			t.Errorf("ParseEndpoint(%q): error %v is not ErrInvalidEndpoint", tc.in, err)
		}
	}
	if _, err := csi.Dial("tcp://127.0.0.1:1"); !errors.Is(err, csi.ErrInvalidEndpoint) {
		t.Errorf("Dial of a tcp endpoint: got %v", err)
	}
}

func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"unix:///run/csi.sock", "unix:/a", "/a/../b", "unix://", "tcp://x", "\x00", "unix:///a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		path, err := csi.ParseEndpoint(in)
		if err != nil {
			if !errors.Is(err, csi.ErrInvalidEndpoint) {
				t.Fatalf("error %v is not ErrInvalidEndpoint", err)
			}
			return
		}
		if !filepath.IsAbs(path) || filepath.Clean(path) != path || len(path) > 107 {
			t.Fatalf("ParseEndpoint(%q) = %q: not a clean absolute socket path", in, path)
		}
		again, err := csi.ParseEndpoint("unix://" + path)
		if err != nil || again != path {
			t.Fatalf("round trip of %q: %q, %v", path, again, err)
		}
	})
}
