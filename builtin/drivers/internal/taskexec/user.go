package taskexec

import (
	"fmt"
	"os/user"
	"strconv"

	"berth.dev/berth/sdk/executor"
)

// LookupUser resolves a task's user by name in the host's user database,
// with its groups.
func LookupUser(name string) (*executor.Credential, error) {
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
