package execdriver

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// capNumbers are the Linux capabilities by name (without "CAP_").
var capNumbers = map[string]int{
	"CHOWN": unix.CAP_CHOWN, "DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
	"FOWNER": unix.CAP_FOWNER, "FSETID": unix.CAP_FSETID, "KILL": unix.CAP_KILL, "SETGID": unix.CAP_SETGID,
	"SETUID": unix.CAP_SETUID, "SETPCAP": unix.CAP_SETPCAP, "LINUX_IMMUTABLE": unix.CAP_LINUX_IMMUTABLE,
	"NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "NET_BROADCAST": unix.CAP_NET_BROADCAST,
	"NET_ADMIN": unix.CAP_NET_ADMIN, "NET_RAW": unix.CAP_NET_RAW, "IPC_LOCK": unix.CAP_IPC_LOCK,
	"IPC_OWNER": unix.CAP_IPC_OWNER, "SYS_MODULE": unix.CAP_SYS_MODULE, "SYS_RAWIO": unix.CAP_SYS_RAWIO,
	"SYS_CHROOT": unix.CAP_SYS_CHROOT, "SYS_PTRACE": unix.CAP_SYS_PTRACE, "SYS_PACCT": unix.CAP_SYS_PACCT,
	"SYS_ADMIN": unix.CAP_SYS_ADMIN, "SYS_BOOT": unix.CAP_SYS_BOOT, "SYS_NICE": unix.CAP_SYS_NICE,
	"SYS_RESOURCE": unix.CAP_SYS_RESOURCE, "SYS_TIME": unix.CAP_SYS_TIME, "SYS_TTY_CONFIG": unix.CAP_SYS_TTY_CONFIG,
	"MKNOD": unix.CAP_MKNOD, "LEASE": unix.CAP_LEASE, "AUDIT_WRITE": unix.CAP_AUDIT_WRITE,
	"AUDIT_CONTROL": unix.CAP_AUDIT_CONTROL, "SETFCAP": unix.CAP_SETFCAP, "MAC_OVERRIDE": unix.CAP_MAC_OVERRIDE,
	"MAC_ADMIN": unix.CAP_MAC_ADMIN, "SYSLOG": unix.CAP_SYSLOG, "WAKE_ALARM": unix.CAP_WAKE_ALARM,
	"BLOCK_SUSPEND": unix.CAP_BLOCK_SUSPEND, "AUDIT_READ": unix.CAP_AUDIT_READ, "PERFMON": unix.CAP_PERFMON,
	"BPF": unix.CAP_BPF, "CHECKPOINT_RESTORE": unix.CAP_CHECKPOINT_RESTORE,
}

// defaultCaps is the bounding set of a task that asks for nothing else:
// Docker's default set, which runs ordinary services (change file owners,
// bind low ports, switch users) but not administer the host (no
// SYS_ADMIN, SYS_MODULE, SYS_PTRACE, NET_ADMIN, ...).
var defaultCaps = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
	"NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

// capName normalizes a capability name from a job ("net_admin",
// "CAP_NET_ADMIN") to the table's form, or "ALL".
func capName(s string) string {
	return strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "CAP_")
}

// taskCaps returns the bounding set for a task: the defaults, plus add,
// minus drop ("all" in drop starts from nothing, in add from every
// capability). Unknown names are reported with the key they came from.
func taskCaps(add, drop []string) ([]int, error) {
	set := map[string]bool{}
	for _, c := range defaultCaps {
		set[c] = true
	}
	for _, d := range drop {
		n := capName(d)
		if _, known := capNumbers[n]; !known && n != "ALL" {
			return nil, capError{key: "cap_drop", name: d}
		}
		if n == "ALL" {
			clear(set)
		}
		delete(set, n)
	}
	for _, a := range add {
		n := capName(a)
		if _, known := capNumbers[n]; !known && n != "ALL" {
			return nil, capError{key: "cap_add", name: a}
		}
		if n == "ALL" {
			for k := range capNumbers {
				set[k] = true
			}
			continue
		}
		set[n] = true
	}
	out := make([]int, 0, len(set))
	for _, n := range slices.Sorted(maps.Keys(set)) {
		out = append(out, capNumbers[n])
	}
	slices.Sort(out)
	return out, nil
}

type capError struct{ key, name string }

func (e capError) Error() string { return fmt.Sprintf("unknown capability %q", e.name) }
