package taskexec

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Through getent, a task's user is what the C library's NSS says: the
// same UID, GID and groups as os/user in this test binary (built with cgo,
// where os/user asks NSS too), for every user of the host.
func TestLookupUserAgreesWithTheCLibrary(t *testing.T) {
	getent, err := exec.LookPath("getent")
	if err != nil {
		t.Skip("no getent on this host: LookupUser reads /etc/passwd itself")
	}
	out, err := exec.Command(getent, "passwd").Output()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(out)) {
		name, _, _ := strings.Cut(line, ":")
		if n++; n > 40 {
			break
		}
		got, err := lookupGetent(getent, name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		want, err := lookupOSUser(name)
		if err != nil {
			t.Errorf("os/user %s: %v", name, err)
			continue
		}
		if got.UID != want.UID || got.GID != want.GID || len(got.Groups) == 0 || got.Groups[0] != got.GID {
			t.Errorf("%s: getent %+v, os/user %+v", name, got, want)
		}
		g, w := slices.Sorted(slices.Values(got.Groups)), slices.Sorted(slices.Values(want.Groups))
		if !slices.Equal(g, w) {
			t.Errorf("%s: groups %v through getent, %v through os/user", name, g, w)
		}
	}
	if n == 0 {
		t.Fatal("getent passwd listed no user")
	}
	for _, name := range []string{"no-such-user-berth", "0", "root:x", ""} {
		if _, err := lookupGetent(getent, name); !errors.As(err, new(user.UnknownUserError)) {
			t.Errorf("%q: %v, want an unknown user (users are looked up by name)", name, err)
		}
	}
}

// fakeGetent puts a getent on PATH that knows one user only NSS has (no
// /etc/passwd line): an LDAP or sssd user. withInitgroups says whether it
// answers the initgroups database (glibc's does; others may not).
func fakeGetent(t *testing.T, withInitgroups bool) {
	t.Helper()
	dir := t.TempDir()
	initgroups := `initgroups) [ "$3" = ldapuser ] && echo "ldapuser   5001 5002" ;;`
	if !withInitgroups {
		initgroups = `initgroups) echo "Unknown database: initgroups" >&2; exit 1 ;;`
	}
	script := `#!/bin/sh
case "$1" in
passwd) [ "$2" = -- ] && [ "$3" = ldapuser ] && { echo "ldapuser:*:5000:5000:LDAP user:/home/ldapuser:/bin/sh"; exit 0; }; exit 2 ;;
` + initgroups + `
group) echo "ldapusers:*:5000:"; echo "dev:*:5001:alice,ldapuser"; echo "ops:*:5002:ldapuser"; echo "other:*:5003:alice" ;;
*) exit 1 ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "getent"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// A user that only NSS knows runs its task as itself: LookupUser asks
// getent, so a berth built without cgo (make build) still finds it.
func TestLookupUserFindsAUserOnlyNSSKnows(t *testing.T) {
	for _, initgroups := range []bool{true, false} {
		fakeGetent(t, initgroups)
		cred, err := LookupUser("ldapuser")
		if err != nil {
			t.Fatalf("initgroups %t: %v", initgroups, err)
		}
		if cred.UID != 5000 || cred.GID != 5000 || !slices.Equal(cred.Groups, []uint32{5000, 5001, 5002}) {
			t.Errorf("initgroups %t: %+v", initgroups, cred)
		}
		if _, err := LookupUser("alice"); !errors.As(err, new(user.UnknownUserError)) {
			t.Errorf("initgroups %t: a user getent does not know: %v", initgroups, err)
		}
	}
}
