package taskexec

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"berth.dev/berth/sdk/executor"
)

// LookupUser resolves a task's user by name in the host's user database,
// with its groups.
//
// The database is the one the host's C library sees through NSS
// (/etc/nsswitch.conf: files, LDAP, sssd, systemd, ...), asked through
// getent(1), so berth itself needs no cgo for it: make build links berth
// statically (osusergo, netgo), which spares every berth process, each
// command and each re-exec of a built-in plugin, the dynamic loader and
// the C library's start-up (issue 26). Only where no getent is installed
// does it read /etc/passwd and /etc/group itself (Go's os/user, which in
// a build with cgo asks NSS too).
func LookupUser(name string) (*executor.Credential, error) {
	getent, err := exec.LookPath("getent")
	if err != nil {
		return lookupOSUser(name)
	}
	return lookupGetent(getent, name)
}

// lookupGetent asks `getent passwd NAME` for the user and `getent
// initgroups NAME` for its supplementary groups; the primary group comes
// first, as getgrouplist(3) (and os/user) list them.
func lookupGetent(getent, name string) (*executor.Credential, error) {
	// getent passwd takes a UID as well as a name; a user is looked up by
	// name only, as user.Lookup does. A name with a ':' or a newline is
	// no passwd entry's.
	if name == "" || strings.ContainsAny(name, ":\n") {
		return nil, user.UnknownUserError(name)
	}
	out, err := runGetent(getent, "passwd", name)
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, user.UnknownUserError(name)
	}
	// name:password:uid:gid:gecos:home:shell, the first entry that
	// matches (NSS order).
	line, _, _ := bytes.Cut(out, []byte("\n"))
	f := strings.Split(string(line), ":")
	if len(f) < 4 || f[0] != name {
		return nil, user.UnknownUserError(name)
	}
	uid, err := strconv.ParseUint(f[2], 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", name, f[2], err)
	}
	gid, err := strconv.ParseUint(f[3], 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", name, f[3], err)
	}
	cred := &executor.Credential{UID: uint32(uid), GID: uint32(gid), Groups: []uint32{uint32(gid)}}
	groups, err := supplementaryGroups(getent, name)
	if err != nil {
		return nil, fmt.Errorf("user %s: groups: %w", name, err)
	}
	for _, g := range groups {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("user %s: group %q: %w", name, g, err)
		}
		if !slices.Contains(cred.Groups, uint32(n)) {
			cred.Groups = append(cred.Groups, uint32(n))
		}
	}
	return cred, nil
}

// supplementaryGroups are the IDs of the groups NSS lists name in:
// `getent initgroups NAME` ("name gid gid ..."), or, from a getent without
// that database (not glibc's), the groups of `getent group` whose member
// list holds name.
func supplementaryGroups(getent, name string) ([]string, error) {
	out, err := runGetent(getent, "initgroups", name)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return groupsByMember(getent, name)
	}
	if err != nil {
		return nil, err
	}
	fields := strings.Fields(string(out))
	if len(fields) > 0 && fields[0] == name {
		fields = fields[1:]
	}
	return fields, nil
}

func groupsByMember(getent, name string) ([]string, error) {
	cmd := exec.Command(getent, "group")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("getent group: %w", err)
	}
	var gids []string
	for line := range strings.Lines(string(out)) {
		// name:password:gid:member,member,...
		f := strings.Split(strings.TrimRight(line, "\n"), ":")
		if len(f) == 4 && slices.Contains(strings.Split(f[3], ","), name) {
			gids = append(gids, f[2])
		}
	}
	return gids, nil
}

// runGetent runs `getent DB KEY`: its output, or nil when the key is not
// found (exit status 2).
func runGetent(getent, db, key string) ([]byte, error) {
	cmd := exec.Command(getent, db, "--", key)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getent %s %s: %w: %s", db, key, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// lookupOSUser is the lookup where no getent is installed.
func lookupOSUser(name string) (*executor.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", name, u.Gid, err)
	}
	cred := &executor.Credential{UID: uint32(uid), GID: uint32(gid)}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("user %s: groups: %w", name, err)
	}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			cred.Groups = append(cred.Groups, uint32(n))
		}
	}
	return cred, nil
}
