package rawexec_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/sdk/procfs"
)

// A plugin that dies inside StartTask leaves the task's executor running
// (a session of its own) with no handle naming it; the task manager asks
// the next plugin to destroy the ID. That plugin never saw the ID: it
// finds the executor by its state directory and kills it and the task.
func TestDestroyOfAnIDOnlyAnEarlierPluginKnewKillsItsExecutor(t *testing.T) {
	first := launch(t)
	cfg := taskCfg(t, "orphan", sh(`touch ready; exec sleep 3600`))
	h := start(t, first.Driver(), cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))
	var st struct {
		Executor struct {
			Executor procfs.Identity `json:"executor"`
			Task     procfs.Identity `json:"task"`
		} `json:"executor"`
	}
	if err := json.Unmarshal(h.GetDriverState(), &st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // if the destroy failed
		if alive, _ := st.Executor.Task.Alive(); alive {
			st.Executor.Task.SignalGroup(syscall.SIGKILL)
		}
		if alive, _ := st.Executor.Executor.Alive(); alive {
			st.Executor.Executor.Signal(syscall.SIGKILL)
		}
	})
	if err := syscall.Kill(first.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	second := launch(t)
	// Not forced: an unknown ID is nothing to destroy, as before.
	if err := second.Driver().DestroyTask(ctxT(t), "some-other-id", false); err != nil {
		t.Fatalf("DestroyTask of an ID no executor has: %v", err)
	}
	if err := second.Driver().DestroyTask(ctxT(t), cfg.GetId(), true); err != nil {
		t.Fatalf("DestroyTask of the orphan: %v", err)
	}
	for name, id := range map[string]procfs.Identity{"executor": st.Executor.Executor, "task": st.Executor.Task} {
		testutil.WaitFor(t, generous, func() error {
			if alive, err := id.Alive(); err != nil || alive {
				return errors.Join(fmt.Errorf("%s (pid %d) still alive", name, id.Pid), err)
			}
			return nil
		})
	}
}
