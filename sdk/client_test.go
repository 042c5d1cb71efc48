package sdk

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"testing"
	"time"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
	"berth.dev/berth/sdk/internal/sdkerr"
	"berth.dev/berth/sdk/procfs"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// serve runs d on an in-process gRPC server and returns a negotiated
// client and the server (to stop it).
func serve(t *testing.T, d Driver) (*DriverClient, *grpc.Server) {
	t.Helper()
	conn, server := plugin.TestGRPCConn(t, func(s *grpc.Server) { RegisterDriver(s, d) })
	t.Cleanup(func() { conn.Close(); server.Stop() })
	c, err := ConnectDriver(testCtx(t), conn)
	if err != nil {
		t.Fatal(err)
	}
	return c, server
}

func TestSentinelsCrossTheWire(t *testing.T) {
	f := newFakeDriver()
	c, _ := serve(t, f)
	all := sdkerr.All()
	// sdk's, sdk/executor's and sdk/procfs's sentinels are all registered.
	for _, want := range []error{ErrTaskNotFound, ErrConfigJSON, executor.ErrLost, procfs.ErrBadStat} {
		if !slices.Contains(all, want) {
			t.Errorf("sdkerr.All() lacks %v", want)
		}
	}
	for _, sentinel := range all {
		want := sentinel.(*sdkerr.Error).GRPCCode()
		f.mu.Lock()
		f.StartErr = fmt.Errorf("deep inside: %w", sentinel)
		f.mu.Unlock()
		_, err := c.StartTask(testCtx(t), &driverpb.TaskConfig{Id: "t1"})
		if !errors.Is(err, sentinel) {
			t.Errorf("%v: client got %v", sentinel, err)
			continue
		}
		var rerr *RPCError
		if !errors.As(err, &rerr) || rerr.Plugin != "fake" || rerr.Method != "StartTask" || rerr.Code != want || rerr.GRPCCode() != want {
			t.Errorf("%v: RPCError %+v, want plugin fake, method StartTask, code %s", sentinel, rerr, want)
		}
		if rerr.Message != "deep inside: "+sentinel.Error() {
			t.Errorf("message %q lost the driver's text", rerr.Message)
		}
		for _, other := range all {
			if other != sentinel && errors.Is(err, other) {
				t.Errorf("%v also matches %v", sentinel, other)
			}
		}
	}
}

// An error wrapping several sentinels crosses as the nearest one, the rule
// rpc/errcode's Code follows, not as whichever a table lists first.
func TestNearestSentinelCrossesTheWire(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("signal: %w: %w", executor.ErrExited, ErrTaskNotFound), executor.ErrExited},
		{fmt.Errorf("signal: %w", fmt.Errorf("%w: %w", ErrTaskNotRunning, ErrPluginShutdown)), ErrTaskNotRunning},
		{fmt.Errorf("outer: %w", &ConfigError{Plugin: "p", Scope: ScopeTask, Key: "id", Problem: "empty"}), ErrInvalidConfig},
	} {
		st := status.Convert(toStatus("p", tc.err))
		err := fromStatus(context.Background(), "p", "M", pluginWatch{}, st.Err())
		if !errors.Is(err, tc.want) || st.Code() != tc.want.(*sdkerr.Error).GRPCCode() {
			t.Errorf("%v crossed as %s %v, want %v", tc.err, st.Code(), err, tc.want)
		}
	}
}

func TestPlainErrorsStayPlain(t *testing.T) {
	f := newFakeDriver()
	f.StartErr = errors.New("the image is corrupt")
	c, _ := serve(t, f)
	_, err := c.StartTask(testCtx(t), &driverpb.TaskConfig{Id: "t1"})
	var rerr *RPCError
	if !errors.As(err, &rerr) || rerr.Code != codes.Unknown || rerr.Err != nil || rerr.Message != "the image is corrupt" {
		t.Fatalf("got %#v", err)
	}
	for _, sentinel := range sdkerr.All() {
		if errors.Is(err, sentinel) {
			t.Errorf("plain error matches %v", sentinel)
		}
	}
}

func TestConfigErrorsCrossTheWire(t *testing.T) {
	c, _ := serve(t, newFakeDriver())
	_, err := c.StartTask(testCtx(t), &driverpb.TaskConfig{Id: "t1", DriverConfig: ConfigMap{
		"count": BoolValue(true), "bogus": IntValue(1),
	}})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("got %v", err)
	}
	got := configErrors(err)
	if len(got) != 3 {
		t.Fatalf("got %d config errors from %v, want 3 (bogus, command, count)", len(got), err)
	}
	for i, key := range []string{"bogus", "command", "count"} {
		if got[i].Key != key || got[i].Plugin != "fake" || got[i].Scope != ScopeTaskConfig || got[i].Problem == "" {
			t.Errorf("config error %d = %+v, want key %q", i, got[i], key)
		}
	}
	// The TaskConfig checks run before the driver sees the task.
	_, err = c.StartTask(testCtx(t), &driverpb.TaskConfig{Id: "a/b"})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Scope != ScopeTask || ce.Key != "id" {
		t.Errorf("bad task id: %v", err)
	}
}

func TestDeadPeerIsPluginShutdown(t *testing.T) {
	f := newFakeDriver()
	c, server := serve(t, f)
	if _, err := c.StartTask(testCtx(t), &driverpb.TaskConfig{Id: "t1", DriverConfig: ConfigMap{"command": StringValue("x")}}); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() {
		_, err := c.WaitTask(testCtx(t), "t1")
		waitErr <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the wait reach the server; the test holds either way
	server.Stop()
	if err := <-waitErr; !errors.Is(err, ErrPluginShutdown) {
		t.Errorf("WaitTask across a dying server = %v, want ErrPluginShutdown", err)
	}
	if _, err := c.InspectTask(testCtx(t), "t1"); !errors.Is(err, ErrPluginShutdown) {
		t.Errorf("call to a dead server = %v, want ErrPluginShutdown", err)
	}
}

func TestCallerCancellationIsContextError(t *testing.T) {
	c, _ := serve(t, newFakeDriver())
	if _, err := c.StartTask(testCtx(t), &driverpb.TaskConfig{Id: "t1", DriverConfig: ConfigMap{"command": StringValue("x")}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.WaitTask(ctx, "t1")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrPluginShutdown) {
		t.Errorf("WaitTask past its deadline = %v, want DeadlineExceeded only", err)
	}
}

func TestFromStatusUsesProcessStateNotText(t *testing.T) {
	dead := make(chan struct{})
	close(dead)
	err := fromStatus(context.Background(), "p", "M", pluginWatch{done: dead}, status.Error(codes.Internal, "anything at all"))
	if !errors.Is(err, ErrPluginShutdown) {
		t.Errorf("error from an exited plugin = %v, want ErrPluginShutdown", err)
	}
	// Without our details, codes with one meaning still map.
	err = fromStatus(context.Background(), "p", "M", pluginWatch{}, status.Error(codes.NotFound, "whatever"))
	if !errors.Is(err, ErrTaskNotFound) {
		t.Errorf("bare NotFound = %v, want ErrTaskNotFound", err)
	}
	err = fromStatus(context.Background(), "p", "M", pluginWatch{}, status.Error(codes.FailedPrecondition, "task is still running"))
	if errors.Is(err, ErrTaskRunning) {
		t.Error("a message that reads like a sentinel must not be taken for it")
	}
}

func TestNegotiation(t *testing.T) {
	if v, ok := pickAPIVersion([]uint32{0, APIVersion, APIVersion + 5}); !ok || v != APIVersion {
		t.Errorf("pickAPIVersion = %d, %v", v, ok)
	}
	if _, ok := pickAPIVersion([]uint32{APIVersion + 1}); ok {
		t.Error("picked a version this sdk does not speak")
	}
	conn, server := plugin.TestGRPCConn(t, func(s *grpc.Server) { RegisterDriver(s, newFakeDriver()) })
	t.Cleanup(func() { conn.Close(); server.Stop() })
	raw := driverpb.NewDriverClient(conn)
	_, err := raw.Negotiate(testCtx(t), &driverpb.NegotiateRequest{ApiVersions: []uint32{APIVersion + 1}})
	if err := fromStatus(testCtx(t), "fake", "Negotiate", pluginWatch{}, err); !errors.Is(err, ErrIncompatibleAPI) {
		t.Errorf("Negotiate with only a future version = %v, want ErrIncompatibleAPI", err)
	}
	c, err := ConnectDriver(testCtx(t), conn)
	if err != nil || c.APIVersion() != APIVersion || c.Name() != "fake" {
		t.Errorf("ConnectDriver = %v, %v (version %d, name %q)", c, err, c.APIVersion(), c.Name())
	}
	// A client that speaks only version 1 (berth before mounts) still gets
	// a plugin of this sdk, at version 1.
	resp, err := raw.Negotiate(testCtx(t), &driverpb.NegotiateRequest{ApiVersions: []uint32{1}})
	if err != nil || resp.GetApiVersion() != 1 {
		t.Errorf("Negotiate offering only version 1 = %v, %v; want version 1", resp, err)
	}
	info, _ := c.PluginInfo(testCtx(t))
	if info.GetVersion() != "9.9.9" {
		t.Errorf("plugin version %q", info.GetVersion())
	}
}

func TestStreams(t *testing.T) {
	f := newFakeDriver()
	c, _ := serve(t, f)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()

	// TaskEvents: subscribed once it returns, so this event is not lost.
	events := c.TaskEvents(ctx)
	f.events.Emit("t9", "hello", map[string]string{"k": "v"})
	for ev, err := range events {
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetTaskId() != "t9" || ev.GetMessage() != "hello" || ev.GetAnnotations()["k"] != "v" || ev.GetTimestamp() == 0 {
			t.Errorf("event %v", ev)
		}
		break
	}

	// Fingerprint: current value, then changes.
	seen := 0
	for fp, err := range c.Fingerprint(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		seen++
		if seen == 1 {
			if fp.GetHealth() != driverpb.Health_HEALTH_HEALTHY {
				t.Errorf("first fingerprint %v", fp)
			}
			f.fp.Set(&driverpb.DriverFingerprint{Health: driverpb.Health_HEALTH_UNHEALTHY, HealthDescription: "disk"})
			continue
		}
		if fp.GetHealth() != driverpb.Health_HEALTH_UNHEALTHY || fp.GetHealthDescription() != "disk" {
			t.Errorf("changed fingerprint %v", fp)
		}
		break
	}

	// Optional features the driver lacks are ErrNotSupported.
	_, err := c.ExecTask(ctx, "t9", []string{"ls"}, time.Second)
	if !errors.Is(err, ErrNotSupported) {
		t.Errorf("ExecTask = %v, want ErrNotSupported", err)
	}
	if errs := streamErrors(c.TaskStats(ctx, "t9", time.Second)); len(errs) != 1 || !errors.Is(errs[0], ErrNotSupported) {
		t.Errorf("TaskStats yielded %v, want one ErrNotSupported", errs)
	}

	// A cancelled stream ends with the context's error.
	cancel()
	if errs := streamErrors(c.Fingerprint(ctx)); len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Errorf("Fingerprint after cancel yielded %v, want one Canceled", errs)
	}
}

// streamErrors drains a stream and returns what it yielded as errors
// (nil for each value).
func streamErrors[T any](seq iter.Seq2[T, error]) []error {
	var out []error
	for _, err := range seq {
		out = append(out, err)
	}
	return out
}
