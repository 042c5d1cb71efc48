package tmpdir

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

func bindMount(source, target string) error {
	return syscall.Mount(source, target, "", syscall.MS_BIND, "")
}

func unmount(target string) error { return syscall.Unmount(target, 0) }

// isMountPoint reports whether path is a mount point, from
// /proc/self/mountinfo (a bind mount of a directory on the same filesystem
// has the same device, so stat cannot tell). A path that does not exist is
// os.ErrNotExist.
func isMountPoint(path string) (bool, error) {
	if _, err := os.Stat(path); err != nil {
		return false, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Field 5 is the mount point, with spaces and such octal-escaped.
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescape(fields[4]) == abs {
			return true, nil
		}
	}
	return false, sc.Err()
}

func unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}
