package procfs

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestParseStatOddCommand(t *testing.T) {
	// The command name may contain spaces and parentheses.
	line := "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 987654 1000000 250 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
	s, err := ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if s.Pid != 1234 || s.Comm != "my (odd) cmd" || s.State != 'S' || s.Ppid != 1 || s.Pgrp != 1234 ||
		s.UserTicks != 7 || s.SystemTicks != 3 || s.StartTicks != 987654 || s.RSSPages != 250 {
		t.Errorf("parsed %+v", s)
	}
	if !s.Alive() {
		t.Error("S state is alive")
	}
	s.State = 'Z'
	if s.Alive() {
		t.Error("a zombie is not alive")
	}
	for _, bad := range []string{"", "1234 no parens", "x (a) S 1", "1 (a) S 1 2 3", "1 (a) S x 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 5 0 1"} {
		if _, err := ParseStat([]byte(bad)); !errors.Is(err, ErrBadStat) {
			t.Errorf("ParseStat(%q) = %v, want ErrBadStat", bad, err)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 1 2 0 0 20 0 1 0 3 100 5 0"))
	f.Add([]byte("7 ()) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"))
	f.Add([]byte("((("))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseStat(data)
		if err != nil {
			if !errors.Is(err, ErrBadStat) {
				t.Fatalf("error %v does not wrap ErrBadStat", err)
			}
			return
		}
		if s.State == 0 {
			t.Fatal("parsed without a state")
		}
	})
}

func TestIdentityOfLiveProcess(t *testing.T) {
	self, err := Self(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if alive, err := self.Alive(); err != nil || !alive {
		t.Errorf("own identity alive = %v, %v", alive, err)
	}
	if _, err := ReadStat(1 << 30); !errors.Is(err, ErrNoProcess) {
		t.Errorf("ReadStat of an unused pid = %v, want ErrNoProcess", err)
	}
}

// TestReusedPIDIsNotSignalled: an identity with the right PID but another
// start time stands for a process that is gone; nothing is signalled.
func TestReusedPIDIsNotSignalled(t *testing.T) {
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	real, err := Self(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	stale := Identity{Pid: real.Pid, StartTicks: real.StartTicks - 1}
	if alive, err := stale.Alive(); err != nil || alive {
		t.Errorf("stale identity alive = %v, %v; want false", alive, err)
	}
	if err := stale.SignalGroup(syscall.SIGKILL); !errors.Is(err, ErrNoProcess) {
		t.Errorf("SignalGroup of a stale identity = %v, want ErrNoProcess", err)
	}
	if err := stale.Signal(syscall.SIGKILL); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Signal of a stale identity = %v, want ErrNoProcess", err)
	}
	time.Sleep(20 * time.Millisecond)
	if alive, _ := real.Alive(); !alive {
		t.Fatal("the process holding the PID was killed")
	}
	group, err := Group(real.Pid)
	if err != nil || len(group) != 1 || group[0].Pid != real.Pid {
		t.Errorf("Group(%d) = %v, %v; want just the sleep", real.Pid, group, err)
	}
	if err := real.SignalGroup(syscall.SIGKILL); err != nil {
		t.Fatalf("SignalGroup of the real identity: %v", err)
	}
	cmd.Wait()
	if alive, _ := real.Alive(); alive {
		t.Error("process alive after SIGKILL and reaping")
	}
}
