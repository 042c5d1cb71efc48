package procfs

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
)

// SignalGroupIf reaches every process of the group (a member besides its
// leader), through a pidfd and, on a kernel without
// PIDFD_SIGNAL_PROCESS_GROUP, through kill(-pid); and sends nothing when
// the check refuses the leader.
func TestSignalGroupIf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pidfd  bool
		refuse bool
	}{{"pidfd", true, false}, {"kill", false, false}, {"refused", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.pidfd {
				old := pidfdSignalGroup
				pidfdSignalGroup = func(int, syscall.Signal) error { return syscall.EINVAL }
				t.Cleanup(func() { pidfdSignalGroup = old })
			}
			sleeper := func(pgid int) *exec.Cmd {
				c := exec.Command("sleep", "600")
				c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					c.Process.Kill()
					c.Wait()
				})
				return c
			}
			leader := sleeper(0)
			member := sleeper(leader.Process.Pid)
			id, err := Self(leader.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			check, want := id.Is, syscall.SIGTERM
			if tc.refuse {
				check, want = func(*Stat) bool { return false }, syscall.SIGKILL
			}
			err = SignalGroupIf(id.Pid, check, syscall.SIGTERM)
			if tc.refuse != errors.Is(err, ErrNoProcess) || (!tc.refuse && err != nil) {
				t.Fatalf("SignalGroupIf: %v (refused: %v)", err, tc.refuse)
			}
			if tc.refuse {
				member.Process.Kill()
			}
			member.Wait()
			ws := member.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != want {
				t.Errorf("group member ended %v, want by %v", member.ProcessState, want)
			}
		})
	}
}
