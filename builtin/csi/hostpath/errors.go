package hostpath

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errBusy is wrapped in errors about a mount that cannot be removed because
// it is still in use; the CO sees codes.Aborted and retries.
var errBusy = errors.New("mount is busy")

// errPathInUse is wrapped in errors about a staging or target path that
// already has something else mounted on it; the CO sees FailedPrecondition.
var errPathInUse = errors.New("another mount is already at the path")

// errNoLoopDevices is wrapped in errors of block-volume operations on a host
// where loop devices cannot be used (no /dev/loop-control, or no
// permission); the CO sees FailedPrecondition.
var errNoLoopDevices = errors.New("loop devices unavailable")

// Everything the plugin returns to a CO is a gRPC status with the code the
// CSI spec prescribes for the condition; messages name the volume, snapshot,
// node or path concerned. These helpers keep the handlers short.

func errInvalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func errNotFound(format string, args ...any) error {
	return status.Errorf(codes.NotFound, format, args...)
}

func errPrecondition(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, format, args...)
}

// errNoPublish is what a controller run with NoPublish answers to the
// publish calls it does not advertise.
func errNoPublish(method string) error {
	return status.Errorf(codes.Unimplemented, "%s: this hostpath plugin runs with --no-publish and does not advertise PUBLISH_UNPUBLISH_VOLUME", method)
}

func errExists(format string, args ...any) error {
	return status.Errorf(codes.AlreadyExists, format, args...)
}

func errExhausted(format string, args ...any) error {
	return status.Errorf(codes.ResourceExhausted, format, args...)
}

func errRange(format string, args ...any) error {
	return status.Errorf(codes.OutOfRange, format, args...)
}

// errInternal reports a failure of the host (I/O, syscalls). A cancelled or
// expired context keeps its own code so the CO knows the outcome is unknown.
func errInternal(err error, format string, args ...any) error {
	if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
		return err
	}
	what := fmt.Sprintf(format, args...)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		st := status.FromContextError(err)
		return status.Errorf(st.Code(), "%s: %v", what, err)
	}
	if errors.Is(err, errPathInUse) || errors.Is(err, errNoLoopDevices) {
		return status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return status.Errorf(codes.ResourceExhausted, "%s: %v", what, err)
	}
	if errors.Is(err, syscall.EFBIG) {
		return status.Errorf(codes.OutOfRange, "%s: %v; the filesystem of the state directory holds no file that large", what, err)
	}
	if errors.Is(err, errBusy) {
		return status.Errorf(codes.Aborted, "%s: %v; retry once the workload has let go of it", what, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

// maxNameBytes is the CSI size limit for strings.
const maxNameBytes = 128

// validateName checks a CO-chosen name (volume, snapshot, group snapshot)
// against the CSI rules: present, at most 128 bytes of UTF-8, no control
// characters other than common whitespace.
func validateName(field, name string) error {
	if name == "" {
		return errInvalid("%s is missing", field)
	}
	if len(name) > maxNameBytes {
		return errInvalid("%s is %d bytes long; CSI allows at most %d", field, len(name), maxNameBytes)
	}
	if !utf8.ValidString(name) {
		return errInvalid("%s %q is not valid UTF-8", field, name)
	}
	for _, r := range name {
		if r <= 0x08 || r == 0x0b || r == 0x0c || (r >= 0x0e && r <= 0x1f) || (r >= 0x7f && r <= 0x9f) {
			return errInvalid("%s %q contains the control character %U", field, name, r)
		}
	}
	return nil
}

func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }
