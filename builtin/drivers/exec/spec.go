package execdriver

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"berth.dev/berth/builtin/drivers/internal/taskexec"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
	"berth.dev/berth/sdk/logrotate"
)

// stateSubdir is the directory of the task dir where executors keep
// their files, one subdirectory per task; the task never sees it (it is
// masked in the task's root).
const stateSubdir = ".exec"

// buildSpec turns a task config into what the executor runs, given the
// chroot env, the task's cgroup.procs files and its propagating binds.
func buildSpec(cfg *driverpb.TaskConfig, pc pluginConfig, stateDir string, mounts []executor.Bind, cgroupProcs []string) (*executor.Spec, error) {
	vals, err := taskSpec().Validate(cfg.GetDriverConfig())
	if err != nil {
		return nil, err
	}
	bad := func(scope sdk.ConfigScope, key, format string, args ...any) error {
		return &sdk.ConfigError{Plugin: Name, Scope: scope, Key: key, Problem: fmt.Sprintf(format, args...)}
	}
	command := vals.String("command")
	if command == "" {
		return nil, bad(sdk.ScopeTaskConfig, "command", "empty command")
	}
	dir := vals.String("cwd")
	if dir == "" {
		dir = "/"
	} else if !filepath.IsAbs(dir) {
		dir = "/" + dir
	}
	if err := checkChrootPath(dir); err != nil {
		return nil, bad(sdk.ScopeTaskConfig, "cwd", "%v", err)
	}
	caps, err := taskCaps(vals.List("cap_add"), vals.List("cap_drop"))
	if err != nil {
		var ce capError
		if errors.As(err, &ce) {
			return nil, bad(sdk.ScopeTaskConfig, ce.key, "%v", ce)
		}
		return nil, err
	}
	var cred *executor.Credential
	if name := cfg.GetUser(); name != "" {
		if cred, err = taskexec.LookupUser(name); err != nil {
			return nil, bad(sdk.ScopeTask, "user", "%v", err)
		}
	}
	logDir := cfg.GetLogDir()
	if logDir == "" {
		logDir = filepath.Join(cfg.GetTaskDir(), "logs")
	}
	logName := cfg.GetName()
	if logName == "" || strings.ContainsRune(logName, '/') || logName == "." || logName == ".." {
		logName = cfg.GetId()
	}
	stream := func(suffix string) logrotate.Config {
		return logrotate.Config{
			Dir:      logDir,
			Name:     logName + "." + suffix,
			MaxFiles: int(cfg.GetLogs().GetMaxFiles()),
			MaxBytes: int64(cfg.GetLogs().GetMaxFileSizeBytes()),
		}
	}
	env := cfg.GetEnv()
	envList := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envList = append(envList, k+"="+env[k])
	}
	binds := append(chrootBinds(pc.chrootEnv), mounts...)
	executor.SortBinds(binds)
	masks := []string{"/" + stateSubdir}
	// The executor writes and rotates the logs by path, as root on the
	// host: a log dir the task could reach, it could swap for a symlink to
	// a host file. Hidden, it cannot.
	if rel, err := filepath.Rel(cfg.GetTaskDir(), logDir); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
		masks = append(masks, "/"+rel)
	}
	return &executor.Spec{
		Path:       command,
		Args:       append([]string{command}, vals.List("args")...),
		Env:        envList,
		Dir:        dir,
		Credential: cred,
		Stdout:     stream("stdout"),
		Stderr:     stream("stderr"),
		StateDir:   stateDir,
		Isolation: &executor.Isolation{
			Root:               cfg.GetTaskDir(),
			Hostname:           hostname(cfg),
			Binds:              binds,
			Masks:              masks,
			Caps:               caps,
			AllowNewPrivileges: !vals.Bool("no_new_privs"),
			Exec:               true,
			CgroupProcs:        cgroupProcs,
		},
	}, nil
}

// chrootBinds are the read-only binds of the chroot env. A host path that
// is a symlink (/bin -> usr/bin) becomes the same symlink; one the host
// lacks is skipped.
func chrootBinds(env [][2]string) []executor.Bind {
	var out []executor.Bind
	for _, e := range env {
		host, task := e[0], e[1]
		st, err := os.Lstat(host)
		if err != nil {
			continue
		}
		if st.Mode()&os.ModeSymlink != 0 {
			if to, err := os.Readlink(host); err == nil {
				out = append(out, executor.Bind{Target: task, Symlink: to})
			}
			continue
		}
		out = append(out, executor.Bind{Source: host, Target: task, ReadOnly: true})
	}
	return out
}

// checkChrootPath refuses paths the init could not use as they are.
func checkChrootPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%q must be a clean absolute path without NUL", p)
	}
	return nil
}

// hostname is the task's hostname: its name, reduced to what a hostname
// may hold.
func hostname(cfg *driverpb.TaskConfig) string {
	var b strings.Builder
	for _, r := range strings.ToLower(cfg.GetName()) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	h := strings.Trim(b.String(), "-")
	if len(h) > 63 {
		h = strings.Trim(h[:63], "-")
	}
	if h == "" {
		return "task"
	}
	return h
}
