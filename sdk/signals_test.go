package sdk

import (
	"errors"
	"syscall"
	"testing"
)

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{
		"": syscall.SIGTERM, "SIGHUP": syscall.SIGHUP, "hup": syscall.SIGHUP, "SigKill": syscall.SIGKILL, "10": syscall.Signal(10),
	} {
		got, err := ParseSignal(in)
		if err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"SIGNOPE", "0", "65", "-1", "SIG"} {
		if _, err := ParseSignal(in); !errors.Is(err, ErrInvalidSignal) {
			t.Errorf("ParseSignal(%q) = %v, want ErrInvalidSignal", in, err)
		}
	}
	if SignalName(syscall.SIGTERM) != "SIGTERM" || SignalName(syscall.Signal(40)) != "signal 40" {
		t.Errorf("SignalName: %q %q", SignalName(syscall.SIGTERM), SignalName(syscall.Signal(40)))
	}
}
