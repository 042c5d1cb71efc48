package volumehooks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// EnvVolumePrefix and VarVolumePrefix name what a task gets of a mounted
// volume: BERTH_VOLUME_<NAME> and ${volume.<name>}.
const (
	EnvVolumePrefix = rules.VolumeEnvPrefix
	VarVolumePrefix = "volume."
)

// taskMount is one volume_mount of a task, with the volume's publish path.
type taskMount struct {
	mount *pb.VolumeMount
	vol   csiVolume
	path  string
}

// mountHook gives a task its volume_mounts: bind mounts of the publish
// paths for an isolating driver, the host paths for an unisolated one
// (or, for a read-only mount of a volume published writable, a read-only
// bind mount of the host path in the task's directory).
type mountHook struct {
	mounts []taskMount
}

var (
	_ runhooks.PrestartHook    = (*mountHook)(nil)
	_ runhooks.ExitedHook      = (*mountHook)(nil)
	_ runhooks.TaskDestroyHook = (*mountHook)(nil)
)

func (h *mountHook) Name() string { return "csi_volume_mounts" }

// EnvName is the environment variable a volume_mount's volume is named
// in: BERTH_VOLUME_ and the group volume's name, upper-cased, with every
// character other than a letter, digit or underscore made an underscore.
func EnvName(volume string) string { return rules.VolumeEnvName(volume) }

// Prestart tells the task where its volumes are. Under an isolating
// driver the publish path is bind-mounted at the volume_mount's
// destination (read-only when the mount or the group's request says so)
// and the env and ${volume.<name>} are the destination; under an
// unisolated one (raw_exec) they are the host's publish path — berth
// gives raw_exec tasks CSI volumes. A read-only mount there is the
// plugin's read-only publish when every mount of the volume in the group
// is read-only (publishReadOnly); when a sibling task mounts it writable,
// the task gets a read-only bind mount of its own instead
// (taskReadOnlyPath), made here as root, or the task does not start
// (ErrReadOnlyMount).
func (h *mountHook) Prestart(ctx context.Context, req *runhooks.PrestartRequest, resp *runhooks.PrestartResponse) error {
	isolated := false
	if req.Driver != nil {
		var err error
		if isolated, err = req.Driver.HonoursMounts(ctx); err != nil {
			return fmt.Errorf("volume mounts of task %q in alloc %s: asking driver %q whether it honours mounts: %w",
				req.Task.GetName(), req.Alloc.GetId(), req.Task.GetDriver(), err)
		}
	}
	resp.Env, resp.Vars = map[string]string{}, map[string]string{}
	for _, m := range h.mounts {
		name := m.mount.GetVolume()
		where := m.path
		readOnly := m.mount.GetReadOnly() || m.vol.req.GetReadOnly()
		switch {
		case isolated:
			where = m.mount.GetDestination()
			resp.Mounts = append(resp.Mounts, &driverpb.Mount{HostPath: m.path, TaskPath: where, ReadOnly: readOnly,
				Propagation: MountPropagation(m.mount.GetPropagationMode())})
		case readOnly && !m.vol.readOnly:
			var err error
			if where, err = readOnlyBind(req, m); err != nil {
				return err
			}
		}
		resp.Env[EnvName(name)] = where
		resp.Vars[VarVolumePrefix+name] = where
	}
	return nil
}

// readOnlyBind makes the task's read-only bind mount of m's publish
// target and returns its path. A recovered task (running since before the
// client restarted) keeps the one it has: it may be using it.
func readOnlyBind(req *runhooks.PrestartRequest, m taskMount) (string, error) {
	target := taskReadOnlyPath(req.Dir.Dir, m.vol.volumeID)
	where := fmt.Sprintf("volume mounts of task %q in alloc %s: read-only mount of volume %q (group volume %q) at %s",
		req.Task.GetName(), req.Alloc.GetId(), m.vol.volumeID, m.vol.name, target)
	if req.Recovered {
		if mounted, err := isMountPoint(target); err == nil && mounted {
			return target, nil
		}
	}
	src, err := filepath.EvalSymlinks(m.path)
	if err != nil {
		return "", fmt.Errorf("%s: the volume's publish path: %w", where, err)
	}
	// The task may own its directory: a symlink it put there must not
	// make the client create, mount or unmount anything elsewhere. Each
	// level below the task dir is made with Mkdir (which does not follow a
	// final symlink) and checked with Lstat before the next is made.
	for _, p := range []string{filepath.Dir(target), target} {
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("%s: %w", where, err)
		}
		if st, err := os.Lstat(p); err != nil || !st.IsDir() {
			return "", fmt.Errorf("%s: %w: %s is not a directory (%v)", where, ErrReadOnlyMount, p, err)
		}
	}
	// A bind an attempt that ended without its Exited hook left (the
	// client died) is replaced: it may be of an earlier publish.
	if err := unmountAll(target); err != nil {
		return "", fmt.Errorf("%s: removing an earlier mount there: %w", where, err)
	}
	if err := bindReadOnly(src, target); err != nil {
		return "", fmt.Errorf("%s: %w (the volume is published writable for another task of the alloc; a task of an unisolated driver is "+
			"given a read-only bind mount, which the client makes as root): %w", where, ErrReadOnlyMount, err)
	}
	return target, nil
}

// Exited removes the task's read-only bind mounts: the attempt is over,
// and the next one's Prestart makes them again.
func (h *mountHook) Exited(_ context.Context, req *runhooks.ExitedRequest) error {
	return h.unmountReadOnly(req.Dir.Dir)
}

// Destroy removes the task's read-only bind mounts, before the alloc dir
// that holds them is removed.
func (h *mountHook) Destroy(_ context.Context, req *runhooks.TaskDestroyRequest) error {
	return h.unmountReadOnly(req.Dir.Dir)
}

func (h *mountHook) unmountReadOnly(taskDir string) error {
	var errs []error
	for _, m := range h.mounts {
		p := taskReadOnlyPath(taskDir, m.vol.volumeID)
		if st, err := os.Lstat(filepath.Dir(p)); err != nil || !st.IsDir() {
			// None made (or a symlink the task put there: what it points
			// at is not the client's to unmount).
			continue
		}
		if err := unmountAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing the read-only mount of volume %q (group volume %q): %w", m.vol.volumeID, m.vol.name, err))
			continue
		}
		removeEmptyDir(p)
		removeEmptyDir(filepath.Dir(p))
	}
	return errors.Join(errs...)
}

// removeEmptyDir removes dir if it is an empty directory; anything else
// (a mount point, a file a task left) stays.
func removeEmptyDir(dir string) { _ = os.Remove(dir) }
