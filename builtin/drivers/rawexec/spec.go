package rawexec

import (
	"fmt"
	"maps"
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
// their files, one subdirectory per task.
const stateSubdir = ".rawexec"

// stateDir is where a task's executor keeps its files.
func stateDir(cfg *driverpb.TaskConfig) string {
	return filepath.Join(cfg.GetTaskDir(), stateSubdir, cfg.GetId())
}

// buildSpec turns a task config into what the executor runs. A command
// name is looked up in the task's PATH here (not finding it is a
// *sdk.StartError); whether an explicit program and the working directory
// are there is the executor's to find out, which it reports as one too.
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
	dir := workDir(cfg.GetTaskDir(), vals.String("cwd"))
	command := vals.String("command")
	if command == "" {
		return nil, bad(sdk.ScopeTaskConfig, "command", "empty command")
	}
	path, err := lookPath(command, dir, env["PATH"])
	if err != nil {
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

// workDir is the task's working directory: cwd, relative to the task
// directory unless absolute.
func workDir(taskDir, cwd string) string {
	switch {
	case cwd == "":
		return taskDir
	case filepath.IsAbs(cwd):
		return cwd
	default:
		return filepath.Join(taskDir, cwd)
	}
}

// lookPath finds command in the task's PATH (executor.LookPath); not
// finding it is an *sdk.StartError.
func lookPath(command, dir, pathEnv string) (string, error) {
	p, serr := executor.LookPath(command, dir, pathEnv)
	if serr != nil {
		return "", taskexec.StartError(serr)
	}
	return p, nil
}
