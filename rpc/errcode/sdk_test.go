package errcode

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
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
	type row struct {
		err  error
		code codes.Code
	}
	sentinels := map[string]row{
		"sdk.ErrPluginShutdown":   {sdk.ErrPluginShutdown, codes.Unavailable},
		"sdk.ErrTaskNotFound":     {sdk.ErrTaskNotFound, codes.NotFound},
		"sdk.ErrTaskExists":       {sdk.ErrTaskExists, codes.AlreadyExists},
		"sdk.ErrTaskRunning":      {sdk.ErrTaskRunning, codes.FailedPrecondition},
		"sdk.ErrTaskNotRunning":   {sdk.ErrTaskNotRunning, codes.FailedPrecondition},
		"sdk.ErrInvalidConfig":    {sdk.ErrInvalidConfig, codes.InvalidArgument},
		"sdk.ErrInvalidHandle":    {sdk.ErrInvalidHandle, codes.InvalidArgument},
		"sdk.ErrInvalidSignal":    {sdk.ErrInvalidSignal, codes.InvalidArgument},
		"sdk.ErrNotSupported":     {sdk.ErrNotSupported, codes.Unimplemented},
		"sdk.ErrDriverUnhealthy":  {sdk.ErrDriverUnhealthy, codes.FailedPrecondition},
		"sdk.ErrIncompatibleAPI":  {sdk.ErrIncompatibleAPI, codes.FailedPrecondition},
		"sdk.ErrNotPluginProcess": {sdk.ErrNotPluginProcess, codes.FailedPrecondition},
		"sdk.ErrConfigJSON":       {sdk.ErrConfigJSON, codes.InvalidArgument},
		"sdk/executor.ErrLost":    {executor.ErrLost, codes.NotFound},
		"sdk/executor.ErrExited":  {executor.ErrExited, codes.FailedPrecondition},
		"sdk/procfs.ErrNoProcess": {procfs.ErrNoProcess, codes.NotFound},
		"sdk/procfs.ErrBadStat":   {procfs.ErrBadStat, codes.Internal},
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
