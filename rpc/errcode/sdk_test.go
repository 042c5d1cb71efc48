package errcode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
	"berth.dev/berth/sdk/procfs"
)

// sdk/ cannot import this package, so its sentinels carry their codes by a
// GRPCCode method of their own (sdk/internal/sdkerr). Code must see them,
// wrapped, and an sdk.RPCError's code, or a driver's refusal reaches the API
// as Unknown / HTTP 500.
func TestCodeOfSDKErrors(t *testing.T) {
	type row struct {
		err  error
		code codes.Code
	}
	sentinels := map[string]row{
		"sdk.ErrPluginShutdown":    {sdk.ErrPluginShutdown, codes.Unavailable},
		"sdk.ErrTaskNotFound":      {sdk.ErrTaskNotFound, codes.NotFound},
		"sdk.ErrTaskExists":        {sdk.ErrTaskExists, codes.AlreadyExists},
		"sdk.ErrTaskRunning":       {sdk.ErrTaskRunning, codes.FailedPrecondition},
		"sdk.ErrTaskNotRunning":    {sdk.ErrTaskNotRunning, codes.FailedPrecondition},
		"sdk.ErrInvalidConfig":     {sdk.ErrInvalidConfig, codes.InvalidArgument},
		"sdk.ErrInvalidHandle":     {sdk.ErrInvalidHandle, codes.InvalidArgument},
		"sdk.ErrInvalidSignal":     {sdk.ErrInvalidSignal, codes.InvalidArgument},
		"sdk.ErrNotSupported":      {sdk.ErrNotSupported, codes.Unimplemented},
		"sdk.ErrDriverUnhealthy":   {sdk.ErrDriverUnhealthy, codes.FailedPrecondition},
		"sdk.ErrRequestTooLarge":   {sdk.ErrRequestTooLarge, codes.ResourceExhausted},
		"sdk.ErrIncompatibleAPI":   {sdk.ErrIncompatibleAPI, codes.FailedPrecondition},
		"sdk.ErrNotPluginProcess":  {sdk.ErrNotPluginProcess, codes.FailedPrecondition},
		"sdk.ErrNotAdapterProcess": {sdk.ErrNotAdapterProcess, codes.FailedPrecondition},
		"sdk.ErrConfigJSON":        {sdk.ErrConfigJSON, codes.InvalidArgument},
		"sdk.ErrTaskStartFailed":   {sdk.ErrTaskStartFailed, codes.FailedPrecondition},
		"sdk/executor.ErrLost":     {executor.ErrLost, codes.NotFound},
		"sdk/executor.ErrExited":   {executor.ErrExited, codes.FailedPrecondition},
		"sdk/procfs.ErrNoProcess":  {procfs.ErrNoProcess, codes.NotFound},
		"sdk/procfs.ErrBadStat":    {procfs.ErrBadStat, codes.Internal},
	}
	// The table above is every sentinel under sdk/, with the code its
	// declaration gives it: a new one must be added here, so its run-time
	// code is checked too.
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	res, err := walkSentinels(root)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for key, s := range res.sentinels {
		name, ok := strings.CutPrefix(key, "berth.dev/berth/")
		if !ok || (!strings.HasPrefix(name, "sdk.") && !strings.HasPrefix(name, "sdk/")) || s.alias != "" {
			continue
		}
		r, ok := sentinels[name]
		if !ok {
			t.Errorf("%s (%s) is not in this test's table", name, s.pos)
			continue
		}
		if declared, _ := res.codeOf(key); declared != r.code {
			t.Errorf("%s is declared with %s, the table says %s", name, declared, r.code)
		}
		seen[name] = true
	}
	for name, r := range sentinels {
		if !seen[name] {
			t.Errorf("%s: the walk found no such sentinel", name)
		}
		sentinel, want := r.err, r.code
		for _, err := range []error{
			sentinel,
			fmt.Errorf("task t1: %w", sentinel),
			fmt.Errorf("driver d1: %w", fmt.Errorf("task t1: %w", sentinel)),
		} {
			if got := Code(err); got != want {
				t.Errorf("Code(%q) = %s, want %s", err, got, want)
			}
		}
		st := status.Convert(Status(fmt.Errorf("task t1: %w", sentinel)))
		if st.Code() != want || st.Message() != "task t1: "+sentinel.Error() {
			t.Errorf("Status(%q) = %s %q", sentinel, st.Code(), st.Message())
		}
	}
	if Code(fmt.Errorf("task t1: %w", sdk.ErrTaskNotFound)) == codes.Unknown ||
		HTTPStatus(Code(fmt.Errorf("task t1: %w", sdk.ErrTaskNotFound))) != http.StatusNotFound {
		t.Error("a wrapped sdk.ErrTaskNotFound does not answer 404")
	}

	cfg := &sdk.ConfigError{Plugin: "raw_exec", Scope: sdk.ScopeTaskConfig, Key: "command", Problem: "required key is missing"}
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"config error", cfg, codes.InvalidArgument},
		{"start error", fmt.Errorf("start task t1: %w", &sdk.StartError{Reason: sdk.StartNotFound, Path: "/bin/x"}), codes.FailedPrecondition},
		{"joined config errors", fmt.Errorf("starting task: %w", errors.Join(cfg, cfg)), codes.InvalidArgument},
		{"rpc error with its sentinel", &sdk.RPCError{Plugin: "p", Method: "StartTask", Code: codes.NotFound, Err: sdk.ErrTaskNotFound}, codes.NotFound},
		// A plugin on another sdk sends codes without berth's reasons: the
		// call's code is still the code.
		{"rpc error without a sentinel", &sdk.RPCError{Plugin: "p", Method: "StartTask", Code: codes.PermissionDenied}, codes.PermissionDenied},
		{"wrapped rpc error", fmt.Errorf("task t1: %w", &sdk.RPCError{Code: codes.AlreadyExists, Err: sdk.ErrTaskExists}), codes.AlreadyExists},
		// The driver's own unclassified error stays Unknown, and an Unknown
		// RPCError does not hide a code below it.
		{"rpc error of a plain driver error", &sdk.RPCError{Plugin: "p", Method: "StartTask", Code: codes.Unknown}, codes.Unknown},
		{"unknown rpc error over a sentinel", &sdk.RPCError{Code: codes.Unknown, Err: sdk.ErrInvalidHandle}, codes.InvalidArgument},
	} {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("%s: Code(%v) = %s, want %s", tc.name, tc.err, got, tc.want)
		}
	}
}

// newerPlugin answers StartTask with a reason this build's sdk does not
// declare, as a plugin built on a newer sdk would.
type newerPlugin struct {
	driverpb.UnimplementedDriverServer
	code codes.Code
}

func (newerPlugin) Negotiate(context.Context, *driverpb.NegotiateRequest) (*driverpb.NegotiateResponse, error) {
	return &driverpb.NegotiateResponse{ApiVersion: sdk.APIVersion, Info: &driverpb.PluginInfo{Name: "newer"}}, nil
}

func (p newerPlugin) StartTask(context.Context, *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	st, err := status.New(p.code, "quota of GPUs used up").WithDetails(&errdetails.ErrorInfo{
		Reason: "GPU_QUOTA_EXHAUSTED", Domain: "driver.berth.dev", Metadata: map[string]string{"plugin": "newer"},
	})
	if err != nil {
		return nil, err
	}
	return nil, st.Err()
}

// A reason the sdk does not know keeps the plugin's code all the way to
// berth's API, even one (NotFound) whose bare form the sdk would have taken
// for a sentinel.
func TestUnknownDriverReasonKeepsItsCode(t *testing.T) {
	for _, code := range []codes.Code{codes.ResourceExhausted, codes.NotFound} {
		conn, server := plugin.TestGRPCConn(t, func(s *grpc.Server) {
			driverpb.RegisterDriverServer(s, newerPlugin{code: code})
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, err := sdk.ConnectDriver(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.StartTask(ctx, &driverpb.TaskConfig{Id: "t1"})
		cancel()
		conn.Close()
		server.Stop()
		if got := Code(fmt.Errorf("task t1: %w", err)); got != code {
			t.Errorf("Code of an unknown reason sent with %s = %s (%v)", code, got, err)
		}
		if st := status.Convert(Status(err)); st.Code() != code {
			t.Errorf("Status of an unknown reason sent with %s = %s", code, st.Code())
		}
		if errors.Is(err, sdk.ErrTaskNotFound) {
			t.Errorf("an unknown reason with %s was taken for ErrTaskNotFound", code)
		}
	}
}
