package sdkerr

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
)

var (
	errA = New(codes.NotFound, "TEST_A", "a not found")
	errB = New(codes.FailedPrecondition, "TEST_B", "b refused")
)

func TestSentinelCarriesCodeAndReason(t *testing.T) {
	var e *Error
	if !errors.As(fmt.Errorf("x: %w", errA), &e) || e != errA || e.GRPCCode() != codes.NotFound || e.Reason() != "TEST_A" || e.Error() != "a not found" {
		t.Fatalf("errA = %+v", e)
	}
	if ByReason("TEST_B") != errB || ByReason("TEST_A") != errA {
		t.Error("ByReason does not find the sentinels")
	}
	if got := ByReason("NEWER_PLUGINS_REASON"); got != nil {
		t.Errorf("ByReason(unknown) = %#v, want a nil error", got)
	}
	all := All()
	if len(all) != 2 || all[0] != errA || all[1] != errB {
		t.Errorf("All() = %v, want [errA errB]", all)
	}
}

func TestNewRefusesSentinelsThatCannotTravel(t *testing.T) {
	for _, tc := range []struct {
		code   codes.Code
		reason string
	}{
		{codes.OK, "TEST_OK"},
		{codes.Unknown, "TEST_UNKNOWN"},
		{codes.Code(99), "TEST_99"},
		{codes.NotFound, ""},
		{codes.Internal, "TEST_A"}, // errA's
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%s, %q) did not panic", tc.code, tc.reason)
				}
			}()
			_ = New(tc.code, tc.reason, "x")
		}()
	}
	if ByReason("TEST_A") != errA {
		t.Error("a refused New replaced errA")
	}
}
