//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// copyTree copies the directory src to dst (which must not exist), keeping
// permissions, ownership, timestamps, symlinks, FIFOs and device nodes, and
// the holes of sparse files. Hard links become separate copies; sockets are
// skipped (they mean nothing without their process). It stops early when ctx
// ends.
func copyTree(ctx context.Context, src, dst string) error {
	type dirTimes struct {
		path string
		st   *unix.Stat_t
	}
	var dirs []dirTimes
	var root unix.Stat_t
	if err := unix.Lstat(src, &root); err != nil {
		return &fs.PathError{Op: "lstat", Path: src, Err: err}
	}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return &fs.PathError{Op: "lstat", Path: path, Err: err}
		}
		perm := st.Mode & 0o7777
		// Whatever is mounted inside the tree is not part of it: a mount
		// point is copied as the empty directory beneath it.
		other := st.Dev != root.Dev
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			if other {
				if err := finishNode(target, &st, perm); err != nil {
					return err
				}
				return fs.SkipDir
			}
			// Directory times are set last: filling a directory changes them.
			dirs = append(dirs, dirTimes{target, &st})
			return nil
		case unix.S_IFREG:
			if other {
				return nil
			}
			if err := copyFile(ctx, path, target, os.FileMode(0o600)); err != nil {
				return err
			}
		case unix.S_IFLNK:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
			if err := unix.Lchown(target, int(st.Uid), int(st.Gid)); err != nil {
				return &fs.PathError{Op: "lchown", Path: target, Err: err}
			}
			return setTimes(target, &st, true)
		case unix.S_IFIFO, unix.S_IFCHR, unix.S_IFBLK:
			if err := unix.Mknod(target, st.Mode&unix.S_IFMT|0o600, int(st.Rdev)); err != nil {
				return &fs.PathError{Op: "mknod", Path: target, Err: err}
			}
		default: // sockets
			return nil
		}
		return finishNode(target, &st, perm)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := finishNode(dirs[i].path, dirs[i].st, dirs[i].st.Mode&0o7777); err != nil {
			return err
		}
	}
	return nil
}

// finishNode applies ownership, then permissions (chown clears setuid bits),
// then timestamps.
func finishNode(path string, st *unix.Stat_t, perm uint32) error {
	if err := os.Lchown(path, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Chmod(path, perm); err != nil {
		return &fs.PathError{Op: "chmod", Path: path, Err: err}
	}
	return setTimes(path, st, false)
}

func setTimes(path string, st *unix.Stat_t, nofollow bool) error {
	flags := 0
	if nofollow {
		flags = unix.AT_SYMLINK_NOFOLLOW
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, flags); err != nil {
		return &fs.PathError{Op: "utimes", Path: path, Err: err}
	}
	return nil
}

// copyFile copies a regular file, skipping holes, and fsyncs the copy.
func copyFile(ctx context.Context, src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if err := copySparse(ctx, in, out, fi.Size()); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copySparse copies the data regions of in to the same offsets of out and
// sizes out to size, so holes stay holes.
func copySparse(ctx context.Context, in, out *os.File, size int64) error {
	if err := out.Truncate(size); err != nil {
		return err
	}
	inFd := int(in.Fd())
	var off int64
	for off < size {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := unix.Seek(inFd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only a hole remains
		}
		if err != nil {
			// No SEEK_DATA support: copy everything.
			data = off
		}
		hole, err := unix.Seek(inFd, data, unix.SEEK_HOLE)
		if err != nil {
			hole = size
		}
		if hole > size {
			hole = size
		}
		if err := copyRange(ctx, in, out, data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

const copyChunk = 1 << 20

func copyRange(ctx context.Context, in, out *os.File, off, n int64) error {
	buf := make([]byte, min(n, copyChunk))
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk := buf[:min(n, int64(len(buf)))]
		r, err := in.ReadAt(chunk, off)
		if r > 0 {
			if _, werr := out.WriteAt(chunk[:r], off); werr != nil {
				return werr
			}
			off += int64(r)
			n -= int64(r)
		}
		if err == io.EOF {
			return nil // the file shrank while we copied
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// usage is what a directory tree occupies.
type usage struct {
	bytes  int64 // allocated bytes (st_blocks), hard links counted once
	inodes int64
}

// diskUsage walks path (a directory or a file) without following symlinks or
// crossing into other filesystems.
func diskUsage(ctx context.Context, path string) (usage, error) {
	var u usage
	var root unix.Stat_t
	if err := unix.Lstat(path, &root); err != nil {
		return u, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		if st.Dev != root.Dev {
			// Something mounted inside the volume is not its content.
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			k := inode{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		u.bytes += st.Blocks * 512
		u.inodes++
		return nil
	})
	return u, err
}
