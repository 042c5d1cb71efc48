package errcode

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/executor"
	"berth.dev/berth/sdk/procfs"
)

// sdk/ cannot import this package, so its sentinels carry their codes by a
// GRPCCode method of their own (sdk/internal/sdkerr). Code must see them,
// wrapped, and an sdk.RPCError's code, or a driver's refusal reaches the API
// as Unknown / HTTP 500.
func TestCodeOfSDKErrors(t *testing.T) {
	sentinels := map[error]codes.Code{
		sdk.ErrPluginShutdown:   codes.Unavailable,
		sdk.ErrTaskNotFound:     codes.NotFound,
		sdk.ErrTaskExists:       codes.AlreadyExists,
		sdk.ErrTaskRunning:      codes.FailedPrecondition,
		sdk.ErrTaskNotRunning:   codes.FailedPrecondition,
		sdk.ErrInvalidConfig:    codes.InvalidArgument,
		sdk.ErrInvalidHandle:    codes.InvalidArgument,
		sdk.ErrInvalidSignal:    codes.InvalidArgument,
		sdk.ErrNotSupported:     codes.Unimplemented,
		sdk.ErrDriverUnhealthy:  codes.FailedPrecondition,
		sdk.ErrIncompatibleAPI:  codes.FailedPrecondition,
		sdk.ErrNotPluginProcess: codes.FailedPrecondition,
		sdk.ErrConfigJSON:       codes.InvalidArgument,
		executor.ErrLost:        codes.NotFound,
		executor.ErrExited:      codes.FailedPrecondition,
		procfs.ErrNoProcess:     codes.NotFound,
		procfs.ErrBadStat:       codes.Internal,
	}
	for sentinel, want := range sentinels {
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
