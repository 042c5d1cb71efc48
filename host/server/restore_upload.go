package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// DefaultSnapshotRestoreMaxBytes is the largest snapshot archive a restore
// takes when server.snapshot_restore_max_size is not set: far above any
// state berth holds in memory, far below a disk.
const DefaultSnapshotRestoreMaxBytes = 4 << 30

// restoreFreeReserve is the free space a restore upload leaves in the
// directory it is buffered in: raft's log and snapshots live there too.
const restoreFreeReserve = 256 << 20

// ErrRestoreTooLarge is returned by SnapshotRestore when the upload passes
// server.snapshot_restore_max_size.
var ErrRestoreTooLarge = errcode.New(codes.InvalidArgument, "snapshot archive too large")

// ErrRestoreNoSpace is returned by SnapshotRestore when the directory the
// upload is buffered in has no room for it.
var ErrRestoreNoSpace = errcode.New(codes.ResourceExhausted, "no space to buffer the snapshot archive")

// bufferRestore writes a restore upload to f, a file in dir, refusing
// before it is all read an upload that is not a berth snapshot (its first
// bytes), that passes max bytes, or that would leave dir with less than
// restoreFreeReserve free: the upload is unauthenticated, and an endless
// one must not fill the leader's disk.
func bufferRestore(stream pb.Operator_SnapshotRestoreServer, f *os.File, dir string, max int64) error {
	var head []byte
	var n int64
	free, statErr := freeBytes(dir)
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		data := chunk.GetData()
		if len(head) < len(archiveMagic) {
			head = append(head, data[:min(len(data), len(archiveMagic)-len(head))]...)
			if string(head) != archiveMagic[:len(head)] {
				return fmt.Errorf("%w: it does not start with %q: not a berth snapshot", ErrBadArchive, archiveMagic)
			}
		}
		n += int64(len(data))
		if n > max {
			return fmt.Errorf("%w: over %d bytes (server.snapshot_restore_max_size)", ErrRestoreTooLarge, max)
		}
		if statErr == nil && n > free-restoreFreeReserve {
			return fmt.Errorf("%w: %s has %d bytes free, and the upload reached %d bytes (%d are kept free for raft)", ErrRestoreNoSpace, dir, free, n, restoreFreeReserve)
		}
		if _, err := f.Write(data); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return fmt.Errorf("%w: %s is full: %v", ErrRestoreNoSpace, dir, err)
			}
			return fmt.Errorf("buffering snapshot: %w", err)
		}
	}
	if len(head) < len(archiveMagic) {
		return fmt.Errorf("%w: %d bytes, shorter than its header: not a berth snapshot", ErrBadArchive, n)
	}
	return nil
}

// freeBytes is the space an unprivileged writer may still use in dir.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
