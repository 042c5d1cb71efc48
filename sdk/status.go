package sdk

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"berth.dev/berth/sdk/internal/sdkerr"
)

// toStatus turns a driver's error into a gRPC status carrying the code and
// reason of the sentinel it wraps, and for config errors every offending key
// as a BadRequest field violation. plugin names the driver in the metadata.
// An error wrapping several sentinels travels as the nearest one (errors.As
// order), the rule rpc/errcode's Code follows too; an error wrapping none
// is Unknown.
func toStatus(plugin string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	var sentinel *sdkerr.Error
	if !errors.As(err, &sentinel) {
		return status.Error(codes.Unknown, err.Error())
	}
	reason := sentinel.Reason()
	st := status.New(sentinel.GRPCCode(), err.Error())
	meta := map[string]string{"plugin": plugin}
	var se *StartError
	if sentinel == ErrTaskStartFailed && errors.As(err, &se) {
		meta[metaStartReason], meta[metaStartPath], meta[metaStartDetail] = string(se.Reason), se.Path, se.Detail
	}
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{
		Reason:   reason,
		Domain:   errorReasonDomain,
		Metadata: meta,
	}}
	if cfgErrs := configErrors(err); len(cfgErrs) > 0 {
		br := &errdetails.BadRequest{}
		for _, ce := range cfgErrs {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
				Field:       string(ce.Scope) + "/" + ce.Key,
				Description: ce.Problem,
			})
		}
		details = append(details, br)
	}
	withDetails, derr := st.WithDetails(details...)
	if derr != nil {
		return st.Err()
	}
	return withDetails.Err()
}

// ErrorInfo metadata keys of a *StartError.
const (
	metaStartReason = "start_reason"
	metaStartPath   = "start_path"
	metaStartDetail = "start_detail"
)

// configErrors collects every *ConfigError in err's tree, in order.
func configErrors(err error) []*ConfigError {
	var out []*ConfigError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if ce, ok := e.(*ConfigError); ok {
			out = append(out, ce)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// fromStatus turns the error of an RPC into an *RPCError unwrapping to the
// sentinel the plugin sent; a reason this sdk does not know (a newer
// plugin's) unwraps to nothing but keeps the call's code in RPCError.Code,
// which is what rpc/errcode answers with. A dead plugin becomes
// ErrPluginShutdown: any error once proc has seen the process exit, and a
// bare Unavailable (the connection broke) only if the process exits within
// proc's grace; from a live plugin Unavailable is an ordinary error, never
// judged by message text. A call the caller cancelled unwraps to the
// context's error.
func fromStatus(ctx context.Context, plugin, method string, proc pluginWatch, err error) error {
	if err == nil {
		return nil
	}
	st, _ := status.FromError(err)
	rerr := &RPCError{Plugin: plugin, Method: method, Code: st.Code(), Message: st.Message()}
	if cerr := ctx.Err(); cerr != nil && (st.Code() == codes.Canceled || st.Code() == codes.DeadlineExceeded) {
		rerr.Err = cerr
		return rerr
	}
	if proc.exited() {
		rerr.Err = ErrPluginShutdown
		return rerr
	}
	var info *errdetails.ErrorInfo
	var bad *errdetails.BadRequest
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == errorReasonDomain {
				info = d
			}
		case *errdetails.BadRequest:
			bad = d
		}
	}
	if info != nil {
		rerr.Err = sdkerr.ByReason(info.GetReason())
		meta := info.GetMetadata()
		switch {
		case rerr.Err == ErrInvalidConfig && meta["plugin"] != "" && bad != nil:
			rerr.Err = configErrorsFromWire(meta["plugin"], bad)
		case rerr.Err == ErrTaskStartFailed && meta[metaStartReason] != "":
			rerr.Err = &StartError{Reason: StartReason(meta[metaStartReason]), Path: meta[metaStartPath], Detail: meta[metaStartDetail]}
		}
		return rerr
	}
	// A status without our details (grpc-go's own, or a plugin built on
	// another sdk): fall back to the codes that have one meaning.
	switch st.Code() {
	case codes.Unavailable:
		// grpc-go says Unavailable when the connection breaks, which is
		// also what a dying plugin looks like before go-plugin has reaped
		// it; a live plugin (or a broken connection to one) is not shut
		// down, and restarting it would kill nothing but its supervision.
		if proc.exitedWithin(ctx) {
			rerr.Err = ErrPluginShutdown
		}
	case codes.NotFound:
		rerr.Err = ErrTaskNotFound
	case codes.AlreadyExists:
		rerr.Err = ErrTaskExists
	case codes.Unimplemented:
		rerr.Err = ErrNotSupported
	case codes.Canceled:
		rerr.Err = context.Canceled
	case codes.DeadlineExceeded:
		rerr.Err = context.DeadlineExceeded
	}
	return rerr
}

// defaultExitGrace is how long a bare Unavailable waits for go-plugin to see
// the plugin process exit. A started plugin is reaped at once; a reattached
// one (not our child) is polled by go-plugin every second.
const defaultExitGrace = 2 * time.Second

// pluginWatch is what a DriverClient knows of its plugin's process.
type pluginWatch struct {
	// done is closed once go-plugin has seen the process exit. It is nil
	// when no process is watched (ConnectDriver over a bare connection):
	// then the connection is all there is of the plugin, and a bare
	// Unavailable (it broke) means the plugin is gone.
	done <-chan struct{}
	// alive, when set, checks the process itself (by PID and start time).
	// go-plugin closes done only once it has read the plugin's stdout and
	// stderr to the end, which never happens while a process the plugin
	// started still holds them; a plugin that died is then seen here.
	alive func() bool
	// grace bounds exitedWithin's wait.
	grace time.Duration
}

// exited reports whether the process is known to have exited.
func (w pluginWatch) exited() bool {
	if w.done == nil {
		return false
	}
	select {
	case <-w.done:
		return true
	default:
	}
	return w.alive != nil && !w.alive()
}

// exitedWithin waits up to the grace (or until ctx ends) for the process to
// exit and reports whether it did.
func (w pluginWatch) exitedWithin(ctx context.Context) bool {
	if w.done == nil {
		return true
	}
	if w.exited() {
		return true
	}
	t := time.NewTimer(w.grace)
	defer t.Stop()
	select {
	case <-w.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return w.exited()
}

// configErrorsFromWire rebuilds the *ConfigError values of a BadRequest.
func configErrorsFromWire(plugin string, bad *errdetails.BadRequest) error {
	var errs []error
	for _, fv := range bad.GetFieldViolations() {
		scope, key := splitField(fv.GetField())
		errs = append(errs, &ConfigError{Plugin: plugin, Scope: scope, Key: key, Problem: fv.GetDescription()})
	}
	if len(errs) == 0 {
		return ErrInvalidConfig
	}
	return errors.Join(errs...)
}

// splitField splits "scope/key" as toStatus writes it.
func splitField(f string) (ConfigScope, string) {
	scope, key, ok := strings.Cut(f, "/")
	if !ok {
		return ScopeTaskConfig, f
	}
	return ConfigScope(scope), key
}
