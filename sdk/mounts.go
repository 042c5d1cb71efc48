package sdk

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"berth.dev/berth/sdk/driverpb"
)

// MountsSupported reports whether a driver that negotiated apiVersion and
// declared caps honours TaskConfig.mounts. Both berth and the sdk's server
// ask it before a task with mounts reaches a driver, so a driver that does
// not isolate (or predates mounts) never silently drops them.
func MountsSupported(apiVersion uint32, caps *driverpb.DriverCapabilities) bool {
	return apiVersion >= APIVersionMounts && caps.GetMountVolumes()
}

// validateMounts checks a task's mounts: both paths absolute and free of
// ".." elements (a task path must not climb out of the task's root, and a
// host path with ".." hides what it names from whoever reads the job), no
// task path twice and none at "/", and a propagation this sdk knows. Each
// problem is a *ConfigError whose key names the mount's index and whose
// problem names its task path.
func validateMounts(plugin string, mounts []*driverpb.Mount) []error {
	var errs []error
	seen := make(map[string]int, len(mounts))
	for i, m := range mounts {
		bad := func(format string, args ...any) {
			errs = append(errs, &ConfigError{Plugin: plugin, Scope: ScopeTask, Key: fmt.Sprintf("mounts[%d]", i),
				Problem: fmt.Sprintf("mount at task path %q: ", m.GetTaskPath()) + fmt.Sprintf(format, args...)})
		}
		if p := m.GetHostPath(); p == "" {
			bad("host_path is required")
		} else if problem := pathProblem(p); problem != "" {
			bad("host_path %q %s", p, problem)
		}
		tp := m.GetTaskPath()
		switch problem := pathProblem(tp); {
		case tp == "":
			bad("task_path is required")
		case problem != "":
			bad("task_path %s", problem)
		case filepath.Clean(tp) == "/":
			bad("task_path must not be the task's root")
		default:
			clean := filepath.Clean(tp)
			if j, dup := seen[clean]; dup {
				bad("task_path is also the task path of mounts[%d]", j)
			} else {
				seen[clean] = i
			}
		}
		if _, known := driverpb.MountPropagation_name[int32(m.GetPropagation())]; !known {
			bad("unknown propagation %d (want one of %s)", m.GetPropagation(), knownPropagations())
		}
	}
	return errs
}

// pathProblem says what is wrong with a mount path, or "" when nothing is.
func pathProblem(p string) string {
	if strings.ContainsRune(p, 0) {
		// The kernel would cut the path at the NUL and mount something else.
		return "contains a NUL byte"
	}
	if !filepath.IsAbs(p) {
		return "is not an absolute path"
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return `contains a ".." element`
	}
	return ""
}

func knownPropagations() string {
	names := make([]string, 0, len(driverpb.MountPropagation_name))
	for v := range int32(len(driverpb.MountPropagation_name)) {
		names = append(names, driverpb.MountPropagation_name[v])
	}
	return strings.Join(names, ", ")
}
