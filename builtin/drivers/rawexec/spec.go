package rawexec

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
	"berth.dev/berth/sdk/logrotate"
)

// defaultPath is the PATH used to find a command when the task's
// environment has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// stateDir is where a task's executor keeps its files.
func stateDir(cfg *driverpb.TaskConfig) string {
	return filepath.Join(cfg.GetTaskDir(), ".rawexec", cfg.GetId())
}

// buildSpec turns a task config into what the executor runs, checking
// everything that can be checked before starting: the command exists and is
// executable, the working directory exists, the user is known.
func buildSpec(cfg *driverpb.TaskConfig) (*executor.Spec, error) {
	vals, err := taskSpec().Validate(cfg.GetDriverConfig())
	if err != nil {
		return nil, err
	}
	bad := func(scope sdk.ConfigScope, key, format string, args ...any) error {
		return &sdk.ConfigError{Plugin: Name, Scope: scope, Key: key, Problem: fmt.Sprintf(format, args...)}
	}
	if cfg.GetTaskDir() == "" {
		return nil, bad(sdk.ScopeTask, "task_dir", "raw_exec needs a task directory")
	}
	env := cfg.GetEnv()
	dir, err := workDir(cfg.GetTaskDir(), vals.String("cwd"))
	if err != nil {
		return nil, bad(sdk.ScopeTaskConfig, "cwd", "%v", err)
	}
	command := vals.String("command")
	path, err := lookPath(command, dir, env["PATH"])
	if err != nil {
		return nil, bad(sdk.ScopeTaskConfig, "command", "%v", err)
	}
	var cred *executor.Credential
	if name := cfg.GetUser(); name != "" {
		if cred, err = lookupUser(name); err != nil {
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
	envList := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envList = append(envList, k+"="+env[k])
	}
	return &executor.Spec{
		Path:       path,
		Args:       append([]string{command}, vals.List("args")...),
		Env:        envList,
		Dir:        dir,
		Credential: cred,
		Stdout:     stream("stdout"),
		Stderr:     stream("stderr"),
		StateDir:   stateDir(cfg),
	}, nil
}

func workDir(taskDir, cwd string) (string, error) {
	dir := taskDir
	if cwd != "" {
		dir = cwd
		if !filepath.IsAbs(cwd) {
			dir = filepath.Join(taskDir, cwd)
		}
	}
	st, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("working directory %s: %w", dir, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return "", fmt.Errorf("working directory %s is not a directory", dir)
	}
	return dir, nil
}

// lookPath finds command the way a shell would, but in the task's PATH,
// not the agent's.
func lookPath(command, dir, pathEnv string) (string, error) {
	if command == "" {
		return "", errors.New("empty command")
	}
	if strings.ContainsRune(command, '/') {
		p := command
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", err
		}
		return p, nil
	}
	if pathEnv == "" {
		pathEnv = defaultPath
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" || !filepath.IsAbs(d) {
			continue // relative PATH entries would depend on the working directory
		}
		p := filepath.Join(d, command)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %s", command, pathEnv)
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, errors.Unwrap(err))
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

func lookupUser(name string) (*executor.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", name, u.Gid, err)
	}
	cred := &executor.Credential{UID: uint32(uid), GID: uint32(gid)}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("user %s: groups: %w", name, err)
	}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			cred.Groups = append(cred.Groups, uint32(n))
		}
	}
	return cred, nil
}
