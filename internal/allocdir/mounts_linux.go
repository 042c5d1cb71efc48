package allocdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"berth.dev/berth/sdk/executor"
)

// unmountUnder unmounts every mount point strictly under dir (resolved,
// as the mount table names it), deepest first; a busy one is detached,
// which is enough for a removal of dir not to reach into it.
func unmountUnder(dir string) error {
	resolved, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	points, err := executor.MountPoints()
	if err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	}
	var under []string
	for _, p := range points {
		if strings.HasPrefix(p, resolved+"/") {
			under = append(under, p)
		}
	}
	// Deepest first; a path mounted twice is unmounted twice.
	slices.SortFunc(under, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, p := range under {
		err := unix.Unmount(p, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, &os.PathError{Op: "unmount", Path: p, Err: err})
		}
	}
	return errors.Join(errs...)
}
