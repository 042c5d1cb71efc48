package ctrdriver

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"berth.dev/berth/sdk"
)

// defaultAllowCaps is Docker's default capability set, which is also
// Nomad's docker driver's default allow_caps: what a task may add with
// cap_add unless the plugin config says otherwise.
var defaultAllowCaps = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
	"NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

// gates are the plugin config's opt-ins to host access: without them a
// job's author cannot reach past the container (privileged, host bind
// mounts, host devices, capabilities beyond Docker's default set), as
// with Nomad's docker driver.
type gates struct {
	privileged, hostMounts, devices bool
	caps                            []string // CAP_ names, or ALL
}

// check refuses a task config that needs host access the plugin config
// does not allow; each problem is a ConfigError naming the task key and
// the plugin config key that would allow it.
func (g gates) check(tc *taskConfig) error {
	var errs []error
	refuse := func(key, problem, allow string) {
		errs = append(errs, &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopeTaskConfig, Key: key,
			Problem: fmt.Sprintf("%s; the node's plugin \"%s\" config must set %s", problem, Name, allow)})
	}
	if tc.privileged && !g.privileged {
		refuse("privileged", "privileged containers are not allowed on this node", "allow_privileged = true")
	}
	if len(tc.mounts) > 0 && !g.hostMounts {
		refuse("mounts", fmt.Sprintf("bind mounts of host paths (%s) are not allowed on this node", tc.mounts[0].source), "allow_host_mounts = true")
	}
	if len(tc.devices) > 0 && !g.devices {
		refuse("devices", fmt.Sprintf("host devices (%s) are not allowed on this node", tc.devices[0].host), "allow_devices = true")
	}
	if !slices.Contains(g.caps, "ALL") {
		for _, c := range tc.capAdd {
			if c == "ALL" {
				refuse("cap_add", "cap_add = [\"all\"] is not allowed on this node", `allow_caps = ["all"]`)
				continue
			}
			if !slices.Contains(g.caps, c) {
				name := strings.TrimPrefix(c, "CAP_")
				refuse("cap_add", fmt.Sprintf("capability %s is not allowed on this node", name),
					fmt.Sprintf("allow_caps to a list holding %q (or \"all\")", strings.ToLower(name)))
			}
		}
	}
	return errors.Join(errs...)
}
