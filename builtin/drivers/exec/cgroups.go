package execdriver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/sdk/driverpb"
)

// cgroupParent is the cgroup under which each task gets "<parent>/<task id>".
const cgroupParent = "/berth"

// v1Subsystems are the cgroup v1 controllers a task is put in: the two
// that limit it, the one that counts its CPU time, and pids (so its
// processes can be listed).
var v1Subsystems = []cgroup1.Name{cgroup1.Memory, cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Pids}

// cgroupDriver creates, reads and removes the tasks' cgroups, on cgroup v2
// (a host whose /sys/fs/cgroup is the unified hierarchy) or v1 (a legacy or
// hybrid host, whose controllers are all in v1 hierarchies; a hybrid
// host's v2 hierarchy has none to offer). The library does the work;
// berth only decides paths and values.
type cgroupDriver struct {
	// v2 is set on a unified host: the mount point of the hierarchy.
	v2 string
	// v1Memory is the v1 memory controller's hierarchy (v1 hosts only).
	v1Memory interface{ Path(string) string }
}

// detectCgroups picks the cgroup version of this host, or says why there
// is none to use.
func detectCgroups() (*cgroupDriver, error) {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return &cgroupDriver{v2: "/sys/fs/cgroup"}, nil
	case cgroups.Legacy, cgroups.Hybrid:
		subs, err := v1Hierarchy()
		if err != nil {
			return nil, err
		}
		c := &cgroupDriver{}
		for _, s := range subs {
			if p, ok := s.(interface{ Path(string) string }); ok && s.Name() == cgroup1.Memory {
				c.v1Memory = p
			}
		}
		return c, nil
	}
	return nil, errors.New("no cgroup hierarchy is mounted at /sys/fs/cgroup")
}

// version is 1 or 2.
func (c *cgroupDriver) version() int {
	if c == nil {
		return 0
	}
	if c.v2 != "" {
		return 2
	}
	return 1
}

// v1Hierarchy is the library's default v1 hierarchy, narrowed to the
// controllers berth uses; it fails if one is not mounted.
func v1Hierarchy() ([]cgroup1.Subsystem, error) {
	all, err := cgroup1.Default()
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: %w", err)
	}
	var out []cgroup1.Subsystem
	for _, s := range all {
		if slices.Contains(v1Subsystems, s.Name()) {
			out = append(out, s)
		}
	}
	if len(out) != len(v1Subsystems) {
		return nil, fmt.Errorf("cgroup v1: want controllers %v mounted, found %d of them", v1Subsystems, len(out))
	}
	return out, nil
}

func taskGroup(taskID string) string { return cgroupParent + "/" + taskID }

// resources turns a task's resources into the runtime spec's form, which
// the library writes for either version (shares become cpu.weight on v2).
func resources(r *driverpb.Resources) *specs.LinuxResources {
	res := &specs.LinuxResources{}
	if s := r.GetCpuShares(); s > 0 {
		shares := uint64(max(s, 2)) // the kernel's minimum
		res.CPU = &specs.LinuxCPU{Shares: &shares}
	}
	if m := r.GetMemoryBytes(); m > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &m}
	}
	return res
}

// create makes the task's cgroup with its limits and returns the
// cgroup.procs files the task's init must be written to.
func (c *cgroupDriver) create(taskID string, r *driverpb.Resources) ([]string, error) {
	return c.createAt(taskGroup(taskID), r)
}

// createAt is create of the cgroup group.
func (c *cgroupDriver) createAt(group string, r *driverpb.Resources) ([]string, error) {
	if c == nil {
		return nil, errors.New("no cgroups on this host")
	}
	res := resources(r)
	if c.v2 != "" {
		if _, err := cgroup2.NewManager(c.v2, group, cgroup2.ToResources(res)); err != nil {
			return nil, fmt.Errorf("create cgroup %s: %w", group, err)
		}
		return []string{filepath.Join(c.v2, group, "cgroup.procs")}, nil
	}
	cg, err := cgroup1.New(cgroup1.StaticPath(group), res, cgroup1.WithHierarchy(v1Hierarchy))
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", group, err)
	}
	var procs []string
	for _, s := range cg.Subsystems() {
		p, ok := s.(interface{ Path(string) string })
		if !ok {
			continue
		}
		procs = append(procs, filepath.Join(p.Path(group), "cgroup.procs"))
	}
	return procs, nil
}

// usage is what a task's cgroup says about it.
type usage struct {
	memoryUsage, memoryRSS uint64
	cpuUser, cpuSystem     uint64 // nanoseconds
	processes              uint64
	oomKills               uint64
}

// errNoCgroup is returned by stat for a task whose cgroup is gone.
var errNoCgroup = errcode.New(codes.NotFound, "task cgroup not found")

// stat reads the task's cgroup.
func (c *cgroupDriver) stat(taskID string) (*usage, error) {
	if c == nil {
		return nil, errNoCgroup
	}
	group := taskGroup(taskID)
	if c.v2 != "" {
		if _, err := os.Stat(filepath.Join(c.v2, group)); errors.Is(err, os.ErrNotExist) {
			return nil, errNoCgroup
		}
		m, err := cgroup2.Load(group, cgroup2.WithMountpoint(c.v2))
		if err != nil {
			return nil, err
		}
		st, err := m.Stat()
		if err != nil {
			return nil, fmt.Errorf("read cgroup %s: %w", group, err)
		}
		return &usage{
			memoryUsage: st.GetMemory().GetUsage(), memoryRSS: st.GetMemory().GetAnon(),
			cpuUser: st.GetCPU().GetUserUsec() * 1000, cpuSystem: st.GetCPU().GetSystemUsec() * 1000,
			processes: st.GetPids().GetCurrent(), oomKills: st.GetMemoryEvents().GetOomKill(),
		}, nil
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(group), cgroup1.WithHierarchy(v1Hierarchy))
	if errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return nil, errNoCgroup
	}
	if err != nil {
		return nil, err
	}
	st, err := cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return nil, fmt.Errorf("read cgroup %s: %w", group, err)
	}
	return &usage{
		memoryUsage: st.GetMemory().GetUsage().GetUsage(), memoryRSS: st.GetMemory().GetTotalRSS(),
		cpuUser: st.GetCPU().GetUsage().GetUser(), cpuSystem: st.GetCPU().GetUsage().GetKernel(),
		processes: st.GetPids().GetCurrent(), oomKills: st.GetMemoryOomControl().GetOomKill(),
	}, nil
}

// remove deletes the task's cgroup; one already gone is no error. The
// kernel refuses while a process is in it, and a killed task's last
// processes can take a moment to leave, so it retries briefly.
func (c *cgroupDriver) remove(taskID string) error {
	if c == nil {
		return nil
	}
	group := taskGroup(taskID)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.removeOnce(group)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cgroupDriver) removeOnce(group string) error {
	if c.v2 != "" {
		if _, err := os.Stat(filepath.Join(c.v2, group)); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		m, err := cgroup2.Load(group, cgroup2.WithMountpoint(c.v2))
		if err != nil {
			return err
		}
		if err := m.Delete(); err != nil {
			return fmt.Errorf("remove cgroup %s: %w", group, err)
		}
		return nil
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(group), cgroup1.WithHierarchy(v1Hierarchy))
	if errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := cg.Delete(); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", group, err)
	}
	return nil
}
