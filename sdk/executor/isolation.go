package executor

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Isolation confines a task (Spec.Isolation): the executor starts a small
// init of its own (this binary again) in new mount, PID, IPC and UTS
// namespaces; the init builds the task's root from Root and Binds,
// pivot_roots into it, limits capabilities, and starts the task as its
// only child. The init stays PID 1 of the namespace: it forwards signals to
// the task, reaps orphans and, when the task exits, reports its wait
// status and exits, which kills whatever the task left in the namespace.
type Isolation struct {
	// Root is the host directory (absolute) that becomes the task's "/".
	Root string `json:"root"`
	// Hostname is set in the task's UTS namespace.
	Hostname string `json:"hostname,omitempty"`
	// Binds are mounted below Root in order; a bind whose target lies
	// under another's must come after it (SortBinds).
	Binds []Bind `json:"binds,omitempty"`
	// Masks are paths inside the task hidden under an empty read-only
	// tmpfs (the driver's own state inside Root, say).
	Masks []string `json:"masks,omitempty"`
	// Caps is the capability bounding set of the task, by number; a task
	// running as root gets these and no others, one running as another
	// user gets none.
	Caps []int `json:"caps"`
	// AllowNewPrivileges leaves no_new_privs unset, so setuid binaries and
	// file capabilities work in the task.
	AllowNewPrivileges bool `json:"allow_new_privileges,omitempty"`
	// Exec makes the init take commands to run in the task (ExecIn) on a
	// socket in the state directory.
	Exec bool `json:"exec,omitempty"`
	// CgroupProcs are cgroup.procs files (of cgroup v1 hierarchies or one
	// v2 cgroup) the executor writes the init's PID to before the init
	// starts the task, so the task and everything it forks are in them
	// from their first instruction.
	CgroupProcs []string `json:"cgroup_procs,omitempty"`
}

// Propagation is how mount events travel across a Bind.
type Propagation string

const (
	// PropagationPrivate: nothing propagates (rprivate).
	PropagationPrivate Propagation = "private"
	// PropagationSlave: the host's mounts under Source appear in the task,
	// not the other way (rslave). Source must be a shared mount on the
	// host (EnsureShared).
	PropagationSlave Propagation = "slave"
	// PropagationShared: mounts on either side appear on the other
	// (rshared). Source must be a shared mount on the host (EnsureShared).
	PropagationShared Propagation = "shared"
)

// Bind is one bind mount into an isolated task's root.
type Bind struct {
	// Source is the host path.
	Source string `json:"source"`
	// Target is the absolute path inside the task.
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// Propagation defaults to private.
	Propagation Propagation `json:"propagation,omitempty"`
	// Symlink, when set, makes Target a symbolic link to it instead of a
	// mount: a host path that is itself a link (/bin -> usr/bin on a
	// merged-/usr system) is reproduced as one.
	Symlink string `json:"symlink,omitempty"`
}

// validate checks what the init relies on: absolute, clean paths with no
// NUL (the kernel would cut the path there) and known propagations.
func (iso *Isolation) validate() error {
	if !filepath.IsAbs(iso.Root) || strings.ContainsRune(iso.Root, 0) {
		return fmt.Errorf("isolation root %q is not an absolute path", iso.Root)
	}
	for i, b := range iso.Binds {
		if err := b.validate(); err != nil {
			return fmt.Errorf("bind %d: %w", i, err)
		}
	}
	for _, m := range iso.Masks {
		if err := checkTaskPath(m); err != nil {
			return fmt.Errorf("mask: %w", err)
		}
	}
	return nil
}

func (b Bind) validate() error {
	if err := checkTaskPath(b.Target); err != nil {
		return err
	}
	if strings.ContainsRune(b.Symlink, 0) {
		return fmt.Errorf("symlink %q for %q contains NUL", b.Symlink, b.Target)
	}
	if b.Symlink == "" && (!filepath.IsAbs(b.Source) || strings.ContainsRune(b.Source, 0)) {
		return fmt.Errorf("source %q for %q is not an absolute path without NUL", b.Source, b.Target)
	}
	switch b.Propagation {
	case "", PropagationPrivate, PropagationSlave, PropagationShared:
		return nil
	}
	return fmt.Errorf("unknown propagation %q for %q", b.Propagation, b.Target)
}

func checkTaskPath(p string) error {
	if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) || filepath.Clean(p) != p || p == "/" {
		return fmt.Errorf("task path %q must be absolute, clean, without NUL and not /", p)
	}
	return nil
}

// SortBinds orders binds so that a target's parents are mounted before it
// (fewer path elements first; ties keep their order), as the init needs.
func SortBinds(binds []Bind) {
	slices.SortStableFunc(binds, func(a, b Bind) int {
		return cmp.Compare(strings.Count(a.Target, "/"), strings.Count(b.Target, "/"))
	})
}
