package errcode

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestClasses pins every class's codes: a code moved in or out of a
// class changes what some caller retries or gives up on.
func TestClasses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		class Class
		want  []codes.Code
	}{
		{"Refusal", Refusal, []codes.Code{codes.InvalidArgument, codes.NotFound, codes.AlreadyExists,
			codes.PermissionDenied, codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated}},
		{"ClaimRefusal", ClaimRefusal, []codes.Code{codes.InvalidArgument, codes.NotFound,
			codes.PermissionDenied, codes.FailedPrecondition, codes.Unauthenticated}},
		{"ReportRefusal", ReportRefusal, []codes.Code{codes.InvalidArgument, codes.NotFound,
			codes.AlreadyExists, codes.PermissionDenied}},
		{"Uncertain", Uncertain, []codes.Code{codes.Canceled, codes.DeadlineExceeded,
			codes.ResourceExhausted, codes.Aborted, codes.Unavailable}},
		{"Unreachable", Unreachable, []codes.Code{codes.DeadlineExceeded, codes.Unavailable}},
		{"CreateUncertain", CreateUncertain, []codes.Code{codes.Canceled, codes.DeadlineExceeded,
			codes.Aborted, codes.Unavailable}},
	} {
		var got []codes.Code
		for c := codes.OK; c <= codes.Unauthenticated+3; c++ {
			if tc.class.Has(c) {
				got = append(got, c)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
	// No code is both an answer and a reason to try again.
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if (Refusal | ClaimRefusal | ReportRefusal).Has(c) && (Uncertain | Unreachable | CreateUncertain).Has(c) {
			t.Errorf("%s is both final and worth a retry", c)
		}
	}
	if len(classes) != len(names) {
		t.Errorf("classes has %d rows, names %d: every code needs a row in both", len(classes), len(names))
	}
}
