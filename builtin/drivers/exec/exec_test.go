package execdriver_test

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sdk"
)

// TestExecTaskRunsInsideTheTask: ExecTask's command runs in the task's
// namespaces and root, as its user, with its environment; its output and
// exit code come back; a timeout kills it; an exited task refuses.
func TestExecTaskRunsInsideTheTask(t *testing.T) {
	d := client(t)
	cfg := taskCfg(t, "exec-in", sh(`echo inside > /tmp/mark; touch /tmp/ready; exec sleep 1000`))
	cfg.User = "nobody"
	cfg.Env["GREETING"] = "hello"
	start(t, d, cfg)
	// nobody may write /tmp, not the root.
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "tmp", "ready"))

	res, err := d.ExecTask(ctxT(t), cfg.GetId(), []string{"sh", "-c", `cat /tmp/mark; hostname; id -u; echo "$GREETING"; echo oops >&2; exit 4`}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.GetStdout()), "inside\nweb\n65534\nhello\n"; got != want {
		t.Errorf("exec stdout %q, want %q (the task's root, hostname, user and environment)", got, want)
	}
	if string(res.GetStderr()) != "oops\n" || res.GetExit().GetExitCode() != 4 {
		t.Errorf("exec stderr %q exit %v, want oops and code 4", res.GetStderr(), res.GetExit())
	}

	begin := time.Now()
	res, err = d.ExecTask(ctxT(t), cfg.GetId(), []string{"sleep", "1000"}, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.GetExit().GetSignal() != int32(syscall.SIGKILL) || !strings.Contains(res.GetExit().GetErr(), "timed out") || time.Since(begin) > generous/2 {
		t.Errorf("exec past its timeout: %v after %s, want killed and timed out", res.GetExit(), time.Since(begin))
	}

	res, err = d.ExecTask(ctxT(t), cfg.GetId(), []string{"no-such-command"}, 0)
	if err != nil || res.GetExit().GetExitCode() != -1 || res.GetExit().GetErr() == "" {
		t.Errorf("exec of a missing command: %v, %v; want exit -1 with the reason", res, err)
	}

	if err := d.StopTask(ctxT(t), cfg.GetId(), generous, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ExecTask(ctxT(t), cfg.GetId(), []string{"true"}, 0); !errors.Is(err, sdk.ErrTaskNotRunning) {
		t.Errorf("exec in an exited task: %v, want ErrTaskNotRunning", err)
	}
}
