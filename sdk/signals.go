package sdk

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// signalsByName are the signals a job may name. Real-time signals are left
// out on purpose: their numbers differ between libcs.
var signalsByName = map[string]syscall.Signal{
	"SIGABRT":   syscall.SIGABRT,
	"SIGALRM":   syscall.SIGALRM,
	"SIGBUS":    syscall.SIGBUS,
	"SIGCHLD":   syscall.SIGCHLD,
	"SIGCONT":   syscall.SIGCONT,
	"SIGFPE":    syscall.SIGFPE,
	"SIGHUP":    syscall.SIGHUP,
	"SIGILL":    syscall.SIGILL,
	"SIGINT":    syscall.SIGINT,
	"SIGIO":     syscall.SIGIO,
	"SIGKILL":   syscall.SIGKILL,
	"SIGPIPE":   syscall.SIGPIPE,
	"SIGPROF":   syscall.SIGPROF,
	"SIGQUIT":   syscall.SIGQUIT,
	"SIGSEGV":   syscall.SIGSEGV,
	"SIGSTOP":   syscall.SIGSTOP,
	"SIGSYS":    syscall.SIGSYS,
	"SIGTERM":   syscall.SIGTERM,
	"SIGTRAP":   syscall.SIGTRAP,
	"SIGTSTP":   syscall.SIGTSTP,
	"SIGTTIN":   syscall.SIGTTIN,
	"SIGTTOU":   syscall.SIGTTOU,
	"SIGURG":    syscall.SIGURG,
	"SIGUSR1":   syscall.SIGUSR1,
	"SIGUSR2":   syscall.SIGUSR2,
	"SIGVTALRM": syscall.SIGVTALRM,
	"SIGWINCH":  syscall.SIGWINCH,
	"SIGXCPU":   syscall.SIGXCPU,
	"SIGXFSZ":   syscall.SIGXFSZ,
}

// ParseSignal returns the signal named s: "SIGTERM", "TERM" and "sigterm"
// are all SIGTERM; a number is taken as is. Empty is SIGTERM, the default
// stop signal. Anything else wraps ErrInvalidSignal.
func ParseSignal(s string) (syscall.Signal, error) {
	if s == "" {
		return syscall.SIGTERM, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("%w: %d is out of range", ErrInvalidSignal, n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	sig, ok := signalsByName[name]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrInvalidSignal, s)
	}
	return sig, nil
}

// SignalName returns the conventional name of sig ("SIGTERM"), or its
// number as "signal 42" when it has none.
func SignalName(sig syscall.Signal) string {
	for name, s := range signalsByName {
		if s == sig {
			return name
		}
	}
	return fmt.Sprintf("signal %d", int(sig))
}
