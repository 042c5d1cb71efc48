package sdk

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/internal/sdkerr"
)

func TestStartErrorCrossesTheWire(t *testing.T) {
	f := newFakeDriver()
	c, _ := serve(t, f)
	for _, want := range []StartError{
		{Reason: StartNotFound, Path: "/opt/app/bin/server", Detail: "no such file or directory"},
		{Reason: StartPermissionDenied, Path: "/srv/run.sh", Detail: "permission denied"},
		{Reason: StartBadWorkingDir, Path: "/srv/missing", Detail: "not a directory"},
		// A reason from a newer plugin arrives as it was sent.
		{Reason: "seccomp-refused", Path: "/bin/true"},
	} {
		f.mu.Lock()
		f.StartErr = fmt.Errorf("start task %q: %w", "t1", &want)
		f.mu.Unlock()
		_, err := c.StartTask(testCtx(t), &driverpb.TaskConfig{Id: "t1"})
		var se *StartError
		if !errors.Is(err, ErrTaskStartFailed) || !errors.As(err, &se) {
			t.Errorf("%s: got %v, want a *StartError and ErrTaskStartFailed", want.Reason, err)
			continue
		}
		if *se != want {
			t.Errorf("StartError crossed as %+v, want %+v", *se, want)
		}
		var rerr *RPCError
		if !errors.As(err, &rerr) || rerr.GRPCCode() != codes.FailedPrecondition {
			t.Errorf("%s: code %v, want FailedPrecondition", want.Reason, rerr)
		}
		if errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: a start failure is not a config error", want.Reason)
		}
	}
	// The bare sentinel (a driver with no *StartError to give) crosses too.
	f.mu.Lock()
	f.StartErr = fmt.Errorf("could not start: %w", ErrTaskStartFailed)
	f.mu.Unlock()
	_, err := c.StartTask(testCtx(t), &driverpb.TaskConfig{Id: "t1"})
	var se *StartError
	if !errors.Is(err, ErrTaskStartFailed) || errors.As(err, &se) {
		t.Errorf("bare ErrTaskStartFailed crossed as %v (StartError %v)", err, se)
	}
}

// A reason this sdk does not know is a newer plugin's: the call's code is
// kept (rpc/errcode's Code reads it from RPCError) and no sentinel is
// guessed, not even the one the code alone would suggest.
func TestUnknownReasonKeepsItsCode(t *testing.T) {
	st, err := status.New(codes.NotFound, "volume snapshot gone").WithDetails(&errdetails.ErrorInfo{
		Reason: "SNAPSHOT_GONE", Domain: errorReasonDomain, Metadata: map[string]string{"plugin": "p"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := fromStatus(context.Background(), "p", "StartTask", pluginWatch{}, st.Err())
	var rerr *RPCError
	if !errors.As(got, &rerr) || rerr.Code != codes.NotFound || rerr.GRPCCode() != codes.NotFound || rerr.Err != nil {
		t.Fatalf("unknown reason = %#v, want an RPCError with code NotFound and no sentinel", got)
	}
	for _, s := range sdkerr.All() {
		if errors.Is(got, s) {
			t.Errorf("unknown reason matches %v", s)
		}
	}
}

// futurePlugin is a driver plugin built on another sdk: it answers with bare
// gRPC statuses.
type futurePlugin struct {
	driverpb.UnimplementedDriverServer
	startErr error
}

func (futurePlugin) Negotiate(context.Context, *driverpb.NegotiateRequest) (*driverpb.NegotiateResponse, error) {
	return &driverpb.NegotiateResponse{ApiVersion: APIVersion, Info: &driverpb.PluginInfo{Name: "future"}}, nil
}

func (p futurePlugin) StartTask(context.Context, *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	return nil, p.startErr
}

// An Unavailable the plugin itself answers (it is busy, say) is an ordinary
// error while the process lives; once the process has exited, the same
// answer is ErrPluginShutdown.
func TestUnavailableIsShutdownOnlyWhenTheProcessIsGone(t *testing.T) {
	conn, server := plugin.TestGRPCConn(t, func(s *grpc.Server) {
		driverpb.RegisterDriverServer(s, futurePlugin{startErr: status.Error(codes.Unavailable, "warming up")})
	})
	t.Cleanup(func() { conn.Close(); server.Stop() })
	done := make(chan struct{})
	c := newDriverClient(conn, done)
	c.proc.grace = 20 * time.Millisecond
	if err := c.negotiate(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	_, err := c.StartTask(testCtx(t), &driverpb.TaskConfig{Id: "t1"})
	var rerr *RPCError
	if errors.Is(err, ErrPluginShutdown) || !errors.As(err, &rerr) || rerr.GRPCCode() != codes.Unavailable || rerr.Message != "warming up" {
		t.Errorf("Unavailable from a live plugin = %#v, want a plain Unavailable RPCError", err)
	}
	if c.Exited() {
		t.Error("Exited before the process exited")
	}
	close(done)
	_, err = c.StartTask(testCtx(t), &driverpb.TaskConfig{Id: "t1"})
	if !errors.Is(err, ErrPluginShutdown) || !c.Exited() {
		t.Errorf("Unavailable after the process exited = %v, want ErrPluginShutdown", err)
	}
}

// The connection of a dying plugin breaks before go-plugin reaps it: a bare
// Unavailable waits (up to the grace) for the exit to be seen.
func TestUnavailableWaitsForTheExit(t *testing.T) {
	done := make(chan struct{})
	time.AfterFunc(30*time.Millisecond, func() { close(done) })
	err := fromStatus(testCtx(t), "p", "WaitTask", pluginWatch{done: done, grace: time.Minute},
		status.Error(codes.Unavailable, "error reading from server: EOF"))
	if !errors.Is(err, ErrPluginShutdown) {
		t.Errorf("Unavailable of a plugin that exits within the grace = %v, want ErrPluginShutdown", err)
	}
	// The caller's deadline ends the wait early, and without an exit the
	// error stays ordinary.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = fromStatus(ctx, "p", "WaitTask", pluginWatch{done: make(chan struct{}), grace: time.Minute},
		status.Error(codes.Unavailable, "connection refused"))
	if errors.Is(err, ErrPluginShutdown) || time.Since(start) > 30*time.Second {
		t.Errorf("Unavailable of a live plugin = %v after %s", err, time.Since(start))
	}
	// With no process watched, the broken connection is all there is.
	err = fromStatus(context.Background(), "p", "WaitTask", pluginWatch{}, status.Error(codes.Unavailable, "connection refused"))
	if !errors.Is(err, ErrPluginShutdown) {
		t.Errorf("Unavailable without a process to watch = %v, want ErrPluginShutdown", err)
	}
}
