package executor

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A namespace init started ahead has a copy of the host's mount table as it
// was then. A mount made on the host since (a CSI volume published for the
// task, say) reaches that copy only by propagation, which a private parent
// mount stops; binding its path then would give the task the directory
// under it. So before a standby executor hands its init a spec, it checks
// that the init's namespace shows every path the task's root is built from
// (Root, the binds' sources) on the mount the host shows it on now; if not,
// the init is discarded and a new one started, as without a standby.

// mountKey names a mount the same way in every namespace it is copied to or
// propagated into: its device, the path inside the device it shows, and
// where it is mounted.
type mountKey struct{ dev, root, point string }

// readMountKeys reads a mountinfo file, in the kernel's order.
func readMountKeys(path string) ([]mountKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountKey
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		out = append(out, mountKey{dev: fields[2], root: unescapeMountinfo(fields[3]), point: unescapeMountinfo(fields[4])})
	}
	return out, sc.Err()
}

// containing returns the mount that shows path: the last (the kernel lists
// a mount after those it covers) of the longest mount point holding it.
func containing(mounts []mountKey, path string) (mountKey, bool) {
	var best mountKey
	found := false
	for _, m := range mounts {
		if path != m.point && !strings.HasPrefix(path, strings.TrimSuffix(m.point, "/")+"/") {
			continue
		}
		if !found || len(m.point) >= len(best.point) {
			best, found = m, true
		}
	}
	return best, found
}

// initSees reports whether the mount namespace of the process pid shows
// each of paths on the mount this process's namespace shows it on.
func initSees(pid int, paths []string) bool {
	host, err := readMountKeys("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	ns, err := readMountKeys("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return false
	}
	for _, p := range paths {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		h, ok := containing(host, p)
		if !ok {
			return false
		}
		if n, ok := containing(ns, p); !ok || n != h {
			return false
		}
	}
	return true
}

// rootSources are the host paths an isolated task's root is built from.
func rootSources(iso *Isolation) []string {
	out := []string{iso.Root}
	for _, b := range iso.Binds {
		if b.Symlink == "" && b.Source != "" {
			out = append(out, b.Source)
		}
	}
	return out
}
