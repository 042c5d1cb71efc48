package sdk

import (
	"context"
	"errors"
	"strings"

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
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{
		Reason:   reason,
		Domain:   errorReasonDomain,
		Metadata: map[string]string{"plugin": plugin},
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
// sentinel the plugin sent. A dead plugin becomes ErrPluginShutdown (by code
// or because go-plugin saw the process exit, never by message text); a call
// the caller cancelled unwraps to the context's error.
func fromStatus(ctx context.Context, plugin, method string, exited func() bool, err error) error {
	if err == nil {
		return nil
	}
	st, _ := status.FromError(err)
	rerr := &RPCError{Plugin: plugin, Method: method, Code: st.Code(), Message: st.Message()}
	if cerr := ctx.Err(); cerr != nil && (st.Code() == codes.Canceled || st.Code() == codes.DeadlineExceeded) {
		rerr.Err = cerr
		return rerr
	}
	if st.Code() == codes.Unavailable || (exited != nil && exited()) {
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
		if p := info.GetMetadata()["plugin"]; p != "" && rerr.Err == ErrInvalidConfig && bad != nil {
			rerr.Err = configErrorsFromWire(p, bad)
		}
		return rerr
	}
	// A status without our details (a plugin built on another sdk, or
	// grpc-go itself): fall back to the codes that have one meaning.
	switch st.Code() {
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
