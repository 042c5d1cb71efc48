package drivertest

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// MountsFromProc is a Cases.MountsSeen for a driver whose tasks are host
// processes in their own mount namespace (exec, containers) and whose
// InspectTask reports the task's host PID in the "pid" attribute. It
// reads the task's mount table (/proc/PID/mountinfo, seen from the host):
// each of cfg's mounts must be mounted at its task path, read-only or
// not, with the propagation its optional fields show (shared =
// bidirectional, master only = host-to-task, none = private), and show
// the host directory's marker file through /proc/PID/root, whereupon its
// host path is reported as cfg's.
func MountsFromProc(ctx context.Context, d sdk.Driver, cfg *driverpb.TaskConfig) ([]*driverpb.Mount, error) {
	st, err := d.InspectTask(ctx, cfg.GetId())
	if err != nil {
		return nil, err
	}
	pid := st.GetAttributes()["pid"]
	entries, err := ProcMounts(pid)
	if err != nil {
		return nil, err
	}
	var seen []*driverpb.Mount
	for _, want := range cfg.GetMounts() {
		e, ok := entries[filepath.Clean(want.GetTaskPath())]
		if !ok {
			continue
		}
		m := &driverpb.Mount{TaskPath: want.GetTaskPath(), ReadOnly: e.ReadOnly, Propagation: e.Propagation}
		inside, err1 := os.ReadFile(filepath.Join("/proc", pid, "root", want.GetTaskPath(), "drivertest-mount"))
		outside, err2 := os.ReadFile(filepath.Join(want.GetHostPath(), "drivertest-mount"))
		if err1 == nil && err2 == nil && string(inside) == string(outside) {
			m.HostPath = want.GetHostPath()
		}
		seen = append(seen, m)
	}
	return seen, nil
}

// ProcMount is what a mount point of a mount table is.
type ProcMount struct {
	ReadOnly    bool
	Propagation driverpb.MountPropagation
}

// ProcMounts reads /proc/PID/mountinfo: mount point → what it is.
func ProcMounts(pid string) (map[string]ProcMount, error) {
	f, err := os.Open(filepath.Join("/proc", pid, "mountinfo"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

func parseMountinfo(r io.Reader) (map[string]ProcMount, error) {
	out := map[string]ProcMount{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			continue
		}
		e := ProcMount{
			ReadOnly:    slices.Contains(strings.Split(fields[5], ","), "ro"),
			Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE,
		}
		var shared, slave bool
		for _, opt := range fields[6:] {
			if opt == "-" {
				break
			}
			shared = shared || strings.HasPrefix(opt, "shared:")
			slave = slave || strings.HasPrefix(opt, "master:")
		}
		switch {
		case shared:
			e.Propagation = driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL
		case slave:
			e.Propagation = driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK
		}
		out[fields[4]] = e
	}
	return out, sc.Err()
}
