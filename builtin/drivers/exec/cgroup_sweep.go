package execdriver

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// PluginStart starts, in the background, the sweep of the task cgroups an
// earlier plugin process left under berth's parent (sweepCgroups): its
// removals still under way when it exited (Shutdown waits only so long),
// or all of them when it was killed. builtin/drivers.Serve calls it as
// the plugin process starts serving; an executor never does.
func (d *Driver) PluginStart() {
	if d.unusable() != "" {
		return
	}
	d.sweepCgroups(cgroupParent, sweepMinAge)
}

// sweepMinAge spares a cgroup made this recently: it may be a task's
// that another berth agent on this host (a test cluster, a dev one) is
// starting, not yet joined by the task's init. A leftover is as old as
// its task.
const sweepMinAge = 10 * time.Second

// sweepCgroups starts the removal of each cgroup under parent that
//   - is no task's this process knows (started, starting or recovered);
//   - holds no process and no child cgroup in any hierarchy: a cgroup
//     with a process in it is never touched (a live task's, recovered
//     or not);
//   - was made at least minAge ago;
//   - counts no OOM kill. A task that exited while no plugin ran is
//     recovered after this start, and its exit report reads that count
//     from its cgroup; a count of 0 is what a missing cgroup reads as.
//
// Each removal is a pending release of its ID (cgroupReleases), so a
// start of that ID meanwhile waits for it before creating its cgroup,
// the known-task check runs after that registration, and Shutdown waits
// for the sweep as for any removal.
func (d *Driver) sweepCgroups(parent string, minAge time.Duration) {
	dirs, err := d.cgroups.parentDirs(parent)
	if err != nil {
		d.logger.Warn("cannot look for task cgroups left by an earlier plugin process", "error", err)
		return
	}
	var ids []string
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			d.logger.Warn("cannot look for task cgroups left by an earlier plugin process", "error", err)
			return
		}
		for _, e := range entries {
			if e.IsDir() && !slices.Contains(ids, e.Name()) {
				ids = append(ids, e.Name())
			}
		}
	}
	for _, id := range ids {
		d.startRelease(id, func() error { return d.sweepOne(parent, dirs, id, minAge) })
	}
}

// sweepOne removes the cgroup parent/id if sweepCgroups' rules allow;
// dirs are parent in each hierarchy.
func (d *Driver) sweepOne(parent string, dirs []string, id string, minAge time.Duration) error {
	for _, cfg := range d.Tasks() {
		if cfg.GetId() == id {
			return nil
		}
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, id)
		entries, err := os.ReadDir(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if st, err := os.Stat(p); err != nil || time.Since(st.ModTime()) < minAge {
			return err
		}
		if slices.ContainsFunc(entries, os.DirEntry.IsDir) {
			return nil
		}
		procs, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(procs)) > 0 {
			return nil
		}
	}
	if n, err := d.cgroups.oomKillsAt(parent + "/" + id); n > 0 {
		return nil
	} else if err != nil && !errors.Is(err, errNoCgroup) {
		return err
	}
	for _, dir := range dirs {
		if err := os.Remove(filepath.Join(dir, id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	d.logger.Info("removed a task cgroup an earlier plugin process left", "task_id", id)
	return nil
}

// parentDirs are the directories of the cgroup parent in each hierarchy
// berth uses.
func (c *cgroupDriver) parentDirs(parent string) ([]string, error) {
	if c == nil {
		return nil, errors.New("no cgroups on this host")
	}
	if c.v2 != "" {
		return []string{filepath.Join(c.v2, parent)}, nil
	}
	subs, err := v1Hierarchy()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, s := range subs {
		if p, ok := s.(interface{ Path(string) string }); ok && !slices.Contains(dirs, p.Path(parent)) {
			dirs = append(dirs, p.Path(parent))
		}
	}
	return dirs, nil
}
