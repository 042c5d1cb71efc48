package taskrunner

import (
	"context"

	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/taskenv"
)

// taskDirHook builds the task's directories.
type taskDirHook struct{}

func (taskDirHook) Name() string { return "task_dir" }

func (taskDirHook) Prestart(_ context.Context, req *runhooks.PrestartRequest, _ *runhooks.PrestartResponse) error {
	return req.Dir.Build()
}

// envHook builds the task's environment (package taskenv).
type envHook struct{}

func (envHook) Name() string { return "task_env" }

func (envHook) Prestart(_ context.Context, req *runhooks.PrestartRequest, resp *runhooks.PrestartResponse) error {
	e := taskenv.Build(taskenv.Input{
		Node: req.Node, Alloc: req.Alloc, Job: req.Job, Group: req.Group, Task: req.Task,
		AllocDir: req.Dir.Shared, TaskDir: req.Dir.Local, SecretsDir: req.Dir.Secrets,
	}).WithDefaults()
	resp.Env, resp.Vars = e.Map(), e.Vars()
	return nil
}

// BuiltinHooks are the hooks every task runner runs first, in this order:
// task_dir (creates the task's dirs), task_env (the task's environment and
// interpolation variables). Hooks from Config.Hooks run after them.
func BuiltinHooks() []runhooks.Hook { return []runhooks.Hook{taskDirHook{}, envHook{}} }
