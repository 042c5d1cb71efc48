package errcode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	errMissing = New(codes.NotFound, "widget not found")
	errFull    = New(codes.ResourceExhausted, "no free write claim")
	// errForeign stands for another library's sentinel (raft's are
	// registered by the server core, whose tests check them).
	errForeign = errors.New("other library: not the leader")
)

func init() { RegisterForeign(errForeign, codes.Unavailable) }

func TestRegisterForeignRefusesCodesThatClassifyNothing(t *testing.T) {
	for _, c := range []codes.Code{codes.OK, codes.Unknown, codes.Code(99)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("RegisterForeign(%s) did not panic", c)
				}
			}()
			RegisterForeign(errors.New("x"), c)
		}()
	}
}

func TestNewRefusesCodesThatClassifyNothing(t *testing.T) {
	for _, c := range []codes.Code{codes.OK, codes.Unknown, codes.Code(99)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%s) did not panic", c)
				}
			}()
			_ = New(c, "x")
		}()
	}
}

func TestCodeFindsTheNearestCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"nil", nil, codes.OK},
		{"sentinel", errMissing, codes.NotFound},
		{"wrapped sentinel", fmt.Errorf("widget w1: %w", errMissing), codes.NotFound},
		{"twice wrapped", fmt.Errorf("apply: %w", fmt.Errorf("widget w1: %w", errFull)), codes.ResourceExhausted},
		{"status", status.Error(codes.AlreadyExists, "w1 exists"), codes.AlreadyExists},
		{"wrapped status", fmt.Errorf("forwarding: %w", status.Error(codes.Aborted, "retry")), codes.Aborted},
		{"context canceled", fmt.Errorf("waiting: %w", context.Canceled), codes.Canceled},
		{"deadline", fmt.Errorf("waiting: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"registered foreign", fmt.Errorf("apply: %w", errForeign), codes.Unavailable},
		{"plain", errors.New("disk on fire"), codes.Unknown},
		{"same text is not the sentinel", errors.New("widget not found"), codes.Unknown},
		// The nearest code wins: a refusal that wraps the context error it
		// was cut short by is still that refusal.
		{"sentinel outside context", fmt.Errorf("%w: %w", errFull, context.Canceled), codes.ResourceExhausted},
		{"context outside sentinel", fmt.Errorf("cut short: %w", fmt.Errorf("%w, %w", context.DeadlineExceeded, errMissing)), codes.DeadlineExceeded},
		{"joined, second coded", errors.Join(errors.New("plain"), errMissing), codes.NotFound},
	}
	for _, tt := range tests {
		if got := Code(tt.err); got != tt.want {
			t.Errorf("%s: Code(%v) = %s, want %s", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestStatusKeepsTheMessageAndDetails(t *testing.T) {
	if Status(nil) != nil {
		t.Fatal("Status(nil) != nil")
	}
	err := Status(fmt.Errorf("node n1: %w", errMissing))
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.NotFound || st.Message() != "node n1: widget not found" {
		t.Fatalf("Status = %v (ok %v)", st, ok)
	}
	if got := Status(errForeign); status.Code(got) != codes.Unavailable || status.Convert(got).Message() != errForeign.Error() {
		t.Fatalf("Status(errForeign) = %v", got)
	}
	if got := Status(errors.New("disk on fire")); status.Code(got) != codes.Unknown {
		t.Fatalf("Status(plain) = %v, want Unknown", got)
	}
	// A status error passes unchanged, details included; wrapped, it keeps
	// its details and code and gains the wrapper's text.
	withInfo, _ := status.New(codes.FailedPrecondition, "task running").WithDetails(&errdetails.ErrorInfo{Reason: "TASK_RUNNING"})
	if got := status.Convert(Status(withInfo.Err())); got.Code() != codes.FailedPrecondition || len(got.Details()) != 1 {
		t.Fatalf("Status(status) = %v, details %v", got, got.Details())
	}
	got := status.Convert(Status(fmt.Errorf("driver d1: %w", withInfo.Err())))
	if got.Code() != codes.FailedPrecondition || len(got.Details()) != 1 || got.Message() != "driver d1: rpc error: code = FailedPrecondition desc = task running" {
		t.Fatalf("Status(wrapped status) = %v, details %v", got, got.Details())
	}
}

// A wrapped sentinel keeps its code where grpc-go converts errors itself
// (streaming handlers, plugins without berth's interceptor).
func TestSentinelsAreGRPCStatuses(t *testing.T) {
	err := fmt.Errorf("volume v1: %w", errFull)
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted || st.Message() != "volume v1: no free write claim" {
		t.Fatalf("status.FromError = %v, %v", st, ok)
	}
	if !errors.Is(err, errFull) || errors.Is(err, errMissing) {
		t.Fatal("errors.Is does not tell the sentinels apart")
	}
}

func TestHTTPTable(t *testing.T) {
	want := map[codes.Code]struct {
		name string
		http int
	}{
		codes.OK:               {"ok", 200},
		codes.Canceled:         {"canceled", 499},
		codes.Unknown:          {"unknown", 500},
		codes.InvalidArgument:  {"invalid_argument", 400},
		codes.DeadlineExceeded: {"deadline_exceeded", 504},
		codes.NotFound:         {"not_found", 404},
		codes.AlreadyExists:    {"already_exists", 409},
		codes.PermissionDenied: {"permission_denied", 403},
		// Not 429: a claimed volume stays claimed; clients must not retry
		// it automatically as they would a rate limit.
		codes.ResourceExhausted:  {"resource_exhausted", 409},
		codes.FailedPrecondition: {"failed_precondition", 409},
		codes.Aborted:            {"aborted", 409},
		codes.OutOfRange:         {"out_of_range", 400},
		codes.Unimplemented:      {"unimplemented", 501},
		codes.Internal:           {"internal", 500},
		codes.Unavailable:        {"unavailable", 503},
		codes.DataLoss:           {"data_loss", 500},
		codes.Unauthenticated:    {"unauthenticated", 401},
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		w, ok := want[c]
		if !ok {
			t.Fatalf("test table lacks %s", c)
		}
		if Name(c) != w.name || HTTPStatus(c) != w.http {
			t.Errorf("%s: Name %q HTTPStatus %d, want %q %d", c, Name(c), HTTPStatus(c), w.name, w.http)
		}
		if back, ok := FromName(Name(c)); !ok || back != c {
			t.Errorf("FromName(%q) = %s, %v", Name(c), back, ok)
		}
	}
	if Name(codes.Code(99)) != "unknown" || HTTPStatus(codes.Code(99)) != http.StatusInternalServerError {
		t.Errorf("undefined code: %q %d", Name(codes.Code(99)), HTTPStatus(codes.Code(99)))
	}
	if c, ok := FromName("teapot"); ok || c != codes.Unknown {
		t.Errorf("FromName(teapot) = %s, %v", c, ok)
	}
}

// Fallback lets a cause's code win over a sentinel that only names the step
// that failed, and keeps the sentinel's code for a cause without one.
func TestFallbackPrefersTheCausesCode(t *testing.T) {
	errStart := New(codes.Unavailable, "plugin failed to start")
	errAPI := New(codes.FailedPrecondition, "no common API version")
	withInfo, _ := status.New(codes.FailedPrecondition, "incompatible").WithDetails(&errdetails.ErrorInfo{Reason: "INCOMPATIBLE_API"})
	tests := []struct {
		name  string
		cause error
		want  codes.Code
	}{
		{"coded cause", fmt.Errorf("negotiating: %w", errAPI), codes.FailedPrecondition},
		{"status cause", withInfo.Err(), codes.FailedPrecondition},
		{"foreign cause", errForeign, codes.Unavailable},
		// A step that ran out of its own time is not the caller's deadline.
		{"canceled cause", fmt.Errorf("handshake: %w", context.Canceled), codes.Unavailable},
		{"deadline cause", fmt.Errorf("launch: %w", context.DeadlineExceeded), codes.Unavailable},
		{"deadline status cause", status.Error(codes.DeadlineExceeded, "ConfigSchema: context deadline exceeded"), codes.Unavailable},
		{"uncoded cause", errors.New("handshake timed out"), codes.Unavailable},
	}
	for _, tt := range tests {
		err := Fallback(errStart, tt.cause)
		if !errors.Is(err, errStart) || !errors.Is(err, tt.cause) {
			t.Errorf("%s: errors.Is lost the sentinel or the cause", tt.name)
		}
		if want := "plugin failed to start: " + tt.cause.Error(); err.Error() != want {
			t.Errorf("%s: message %q, want %q", tt.name, err, want)
		}
		wrapped := fmt.Errorf("driver d1: %w", err)
		for _, e := range []error{err, wrapped} {
			if got := Code(e); got != tt.want {
				t.Errorf("%s: Code(%v) = %s, want %s", tt.name, e, got, tt.want)
			}
			st := status.Convert(Status(e))
			if st.Code() != tt.want || st.Message() != e.Error() {
				t.Errorf("%s: Status(%v) = %s %q", tt.name, e, st.Code(), st.Message())
			}
			if st, _ := status.FromError(e); st.Code() != tt.want {
				t.Errorf("%s: status.FromError(%v) = %s, want %s", tt.name, e, st.Code(), tt.want)
			}
		}
	}
	// A status cause keeps its details through Status.
	st := status.Convert(Status(fmt.Errorf("driver d1: %w", Fallback(errStart, withInfo.Err()))))
	if len(st.Details()) != 1 {
		t.Errorf("details of the cause's status lost: %v", st.Details())
	}
	// By contrast, a plain outer wrap reclassifies: the nearest code wins.
	if got := Code(fmt.Errorf("%w: %w", errStart, errAPI)); got != codes.Unavailable {
		t.Errorf("outer sentinel: Code = %s, want Unavailable (nearest wins)", got)
	}
}
