package ctrdriver

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
)

// taskDirMounts are the berth directories a container sees, as Nomad's
// docker driver shows them: the environment variable naming the host
// directory, and where it appears in the container.
var taskDirMounts = []struct{ env, target string }{
	{"BERTH_ALLOC_DIR", "/alloc"},
	{"BERTH_TASK_DIR", "/local"},
	{"BERTH_SECRETS_DIR", "/secrets"},
}

// taskMounts are the container's bind mounts: berth's task directories,
// the task's protocol mounts (volumes, CSI plugin directories) and the
// config's mounts. The host side of every propagating mount is made a
// shared mount point first, and counted as used by the task (until
// releaseShared): uses lists them all, made those berth made shared
// (by this task or another), which go back when their last user goes.
func (d *Driver) taskMounts(cfg *driverpb.TaskConfig, tc *taskConfig) (mounts []bindMount, uses, made []string, err error) {
	for _, m := range taskDirMounts {
		if host := cfg.GetEnv()[m.env]; host != "" && filepath.IsAbs(host) {
			if fi, err := os.Stat(host); err == nil && fi.IsDir() {
				mounts = append(mounts, bindMount{source: host, target: m.target, propagation: "rprivate"})
			}
		}
	}
	for _, m := range cfg.GetMounts() {
		mounts = append(mounts, bindMount{source: m.GetHostPath(), target: filepath.Clean(m.GetTaskPath()),
			readOnly: m.GetReadOnly(), propagation: propagationOf(m.GetPropagation())})
	}
	for _, m := range tc.mounts {
		for _, own := range mounts {
			if own.target == m.target {
				return nil, uses, made, &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopeTaskConfig, Key: "mounts",
					Problem: fmt.Sprintf("mounts[%d]: container path %s is where berth mounts %s (the task's directory, volume or CSI plugin directory); choose another", m.index, m.target, own.source)}
			}
		}
	}
	mounts = append(mounts, tc.mounts...)
	for i, m := range mounts {
		if _, err := os.Stat(m.source); err != nil {
			return nil, uses, made, &sdk.StartError{Reason: sdk.StartNotFound, Path: m.source,
				Detail: fmt.Sprintf("host path of the mount at %s: %v", m.target, err)}
		}
		if m.propagation == "rprivate" {
			continue
		}
		resolved, isMade, err := d.useShared(m.source)
		if err != nil {
			return nil, uses, made, &sdk.StartError{Reason: sdk.StartOther, Path: m.source, Detail: err.Error()}
		}
		mounts[i].source = resolved
		if slices.Contains(uses, resolved) {
			d.releaseShared([]string{resolved}) // counted once per task
			continue
		}
		uses = append(uses, resolved)
		if isMade {
			made = append(made, resolved)
		}
	}
	return mounts, uses, made, nil
}

// useShared makes dir a shared mount point (when it is not one) and
// counts one more user of it; it reports the resolved dir and whether
// berth made it shared.
func (d *Driver) useShared(dir string) (string, bool, error) {
	d.sharedMu.Lock()
	defer d.sharedMu.Unlock()
	resolved, made, err := executor.EnsureShared(dir)
	if err != nil {
		return "", false, err
	}
	if d.sharedUsers == nil {
		d.sharedUsers, d.sharedMade = map[string]int{}, map[string]bool{}
	}
	d.sharedUsers[resolved]++
	if made {
		d.sharedMade[resolved] = true
	}
	return resolved, d.sharedMade[resolved], nil
}

// adoptShared counts a recovered task's uses of shared mount points, and
// which of them berth made.
func (d *Driver) adoptShared(uses, made []string) {
	d.sharedMu.Lock()
	defer d.sharedMu.Unlock()
	if d.sharedUsers == nil {
		d.sharedUsers, d.sharedMade = map[string]int{}, map[string]bool{}
	}
	for _, dir := range uses {
		d.sharedUsers[dir]++
	}
	for _, dir := range made {
		d.sharedMade[dir] = true
	}
}

// releaseShared ends one use of each dir; a dir berth made shared goes
// back to private when its last user goes.
func (d *Driver) releaseShared(dirs []string) []error {
	d.sharedMu.Lock()
	defer d.sharedMu.Unlock()
	var errs []error
	for _, dir := range dirs {
		if d.sharedUsers[dir] > 1 {
			d.sharedUsers[dir]--
			continue
		}
		delete(d.sharedUsers, dir)
		if !d.sharedMade[dir] {
			continue
		}
		errs = append(errs, d.unshare(dir)...)
	}
	return errs
}

// unshare undoes berth's bind at dir (sharedMu held). One still busy (a
// mount below it, as a staged volume under a CSI plugin's volume dir)
// stays berth's: the next task to use dir inherits it, and its last user
// tries again.
func (d *Driver) unshare(dir string) []error {
	released, err := executor.ReleaseShared(dir)
	if err != nil {
		return []error{err}
	}
	if released {
		delete(d.sharedMade, dir)
	} else {
		d.logger.Debug("shared mount point still in use; kept", "dir", dir)
	}
	return nil
}

// releaseUnowned releases the shared mount points berth made for a
// container this plugin never counted (one a DestroyTask finds without a
// handle), unless a task of this plugin uses them.
func (d *Driver) releaseUnowned(made []string) []error {
	d.sharedMu.Lock()
	defer d.sharedMu.Unlock()
	var errs []error
	for _, dir := range made {
		if d.sharedUsers[dir] > 0 {
			continue
		}
		d.sharedMade[dir] = true
		errs = append(errs, d.unshare(dir)...)
	}
	return errs
}

// specOptions builds the container's OCI spec from the image, the task
// and its driver config.
func specOptions(ctx context.Context, img client.Image, cfg *driverpb.TaskConfig, tc *taskConfig, mounts []bindMount) ([]oci.SpecOpts, error) {
	ic, err := img.Spec(ctx)
	if err != nil {
		return nil, fmt.Errorf("image %s: read its config: %w", img.Name(), err)
	}
	args := processArgs(ic.Config.Entrypoint, ic.Config.Cmd, tc)
	if len(args) == 0 {
		return nil, &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopeTaskConfig, Key: "command",
			Problem: fmt.Sprintf("image %s has no ENTRYPOINT or CMD: set command", img.Name())}
	}
	opts := []oci.SpecOpts{
		oci.WithImageConfig(img),
		oci.WithProcessArgs(args...),
		oci.WithEnv(containerEnv(cfg.GetEnv(), tc.env, imageHasPath(ic.Config.Env), mounts)),
	}
	if tc.workingDir != "" {
		opts = append(opts, oci.WithProcessCwd(tc.workingDir))
	}
	if u := cmp(tc.user, cfg.GetUser()); u != "" {
		opts = append(opts, oci.WithUser(u))
	}
	if h := hostname(cfg.GetName()); h != "" && !tc.hostNet {
		opts = append(opts, oci.WithHostname(h))
	}
	if tc.hostNet {
		opts = append(opts, oci.WithHostNamespace(specs.NetworkNamespace), oci.WithHostHostsFile, oci.WithHostResolvconf)
	}
	if tc.privileged {
		opts = append(opts, oci.WithPrivileged, oci.WithAllDevicesAllowed, oci.WithHostDevices)
	}
	// Drops first, then adds, as Docker: cap_drop = ["all"] with cap_add
	// = ["NET_ADMIN"] leaves NET_ADMIN.
	if slices.Contains(tc.capDrop, "ALL") {
		opts = append(opts, oci.WithCapabilities(nil))
	} else if len(tc.capDrop) > 0 {
		opts = append(opts, oci.WithDroppedCapabilities(tc.capDrop))
	}
	if slices.Contains(tc.capAdd, "ALL") {
		opts = append(opts, oci.WithAllCurrentCapabilities)
	} else if len(tc.capAdd) > 0 {
		opts = append(opts, oci.WithAddedCapabilities(tc.capAdd))
	}
	for _, dev := range tc.devices {
		opts = append(opts, oci.WithDevices(dev.host, dev.container, dev.permissions))
	}
	if tc.readonlyRootfs {
		opts = append(opts, oci.WithRootFSReadonly())
	}
	if r := cfg.GetResources(); r != nil {
		if r.GetCpuShares() > 0 {
			opts = append(opts, oci.WithCPUShares(uint64(r.GetCpuShares())))
		}
		if r.GetMemoryBytes() > 0 {
			opts = append(opts, oci.WithMemoryLimit(uint64(r.GetMemoryBytes())))
		}
	}
	if !tc.privileged {
		// Docker's default syscall filter, as Docker and Nomad's docker
		// driver apply it; last, since what it allows follows the
		// capabilities set above.
		opts = append(opts, seccomp.WithDefaultProfile())
	}
	opts = append(opts, oci.WithMounts(specMounts(mounts)), withRootfsPropagation(mounts))
	return opts, nil
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// processArgs is the container's command line, with Docker's rules:
// entrypoint replaces the image's ENTRYPOINT and drops its CMD; command
// (with args) or args alone replace CMD.
func processArgs(imgEntry, imgCmd []string, tc *taskConfig) []string {
	entry, cmd := imgEntry, imgCmd
	if tc.hasEntry {
		entry, cmd = tc.entrypoint, nil
	}
	switch {
	case tc.hasCommand:
		cmd = append([]string{tc.command}, tc.args...)
	case tc.hasArgs:
		cmd = tc.args
	}
	return append(slices.Clone(entry), cmd...)
}

func imageHasPath(env []string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") })
}

// containerEnv is the environment added to the image's: the task's (with
// berth's directory variables pointing at their mounts, and PATH only when
// the image sets none, since berth's default PATH is the host's), then the
// driver config's env.
func containerEnv(taskEnv, cfgEnv map[string]string, imagePath bool, mounts []bindMount) []string {
	env := maps.Clone(taskEnv)
	if env == nil {
		env = map[string]string{}
	}
	if imagePath {
		delete(env, "PATH")
	}
	for _, m := range taskDirMounts {
		if host, ok := env[m.env]; ok && slices.ContainsFunc(mounts, func(b bindMount) bool { return b.source == host && b.target == m.target }) {
			env[m.env] = m.target
		}
	}
	maps.Copy(env, cfgEnv)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// hostname is the task's name when it is a valid host name.
func hostname(name string) string {
	if len(name) == 0 || len(name) > 63 {
		return ""
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || (r == '-' && i > 0 && i < len(name)-1)
		if !ok {
			return ""
		}
	}
	return name
}

func specMounts(mounts []bindMount) []specs.Mount {
	out := make([]specs.Mount, 0, len(mounts))
	for _, m := range mounts {
		opts := []string{"rbind", m.propagation}
		if m.readOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		out = append(out, specs.Mount{Type: "bind", Source: m.source, Destination: m.target, Options: opts})
	}
	return out
}

// withRootfsPropagation makes the container's root a shared mount when a
// mount is bidirectional (else the mounts the container makes under it
// cannot reach the host), a slave when one is host-to-task.
func withRootfsPropagation(mounts []bindMount) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		prop := ""
		for _, m := range mounts {
			switch {
			case m.propagation == "rshared":
				prop = "rshared"
			case m.propagation == "rslave" && prop == "":
				prop = "rslave"
			}
		}
		if prop != "" {
			if s.Linux == nil {
				s.Linux = &specs.Linux{}
			}
			s.Linux.RootfsPropagation = prop
		}
		return nil
	}
}
