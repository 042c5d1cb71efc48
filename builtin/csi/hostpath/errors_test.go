package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrInternalCodes(t *testing.T) {
	cases := map[codes.Code]error{
		codes.Aborted:            fmt.Errorf("unmount /t: %w", errBusy),
		codes.FailedPrecondition: fmt.Errorf("/t: %w", errPathInUse),
		codes.Canceled:           fmt.Errorf("copy: %w", context.Canceled),
		codes.DeadlineExceeded:   fmt.Errorf("copy: %w", context.DeadlineExceeded),
		codes.NotFound:           status.Error(codes.NotFound, "already a status"),
		codes.Internal:           &fs.PathError{Op: "mkdir", Path: "/x", Err: errors.New("disk on fire")},
	}
	for want, err := range cases {
		got := errInternal(err, "stage volume %s", "vol-1")
		if status.Code(got) != want {
			t.Errorf("errInternal(%v) has code %v, want %v", err, status.Code(got), want)
		}
		if want != codes.NotFound && !strings.Contains(status.Convert(got).Message(), "stage volume vol-1") {
			t.Errorf("errInternal(%v) message %q does not say what failed", err, status.Convert(got).Message())
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", strings.Repeat("x", 128), "with space\tand tab", "ünïcode"} {
		if err := validateName("name", ok); err != nil {
			t.Errorf("validateName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 129), "nul\x00", "bell\x07", "del\x7f", "c1\u0085", "\xff\xfe"} {
		if status.Code(validateName("name", bad)) != codes.InvalidArgument {
			t.Errorf("validateName(%q) accepted", bad)
		}
	}
}
