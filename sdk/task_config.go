package sdk

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sync"

	"berth.dev/berth/sdk/driverpb"
)

// taskIDRE is compiled on first use: berth's one binary links the sdk into
// every command, and the {1,128} repeat is dear to compile at each start.
var taskIDRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`) })

// ValidTaskID reports whether id is a valid task ID: 1 to 128 characters
// from [A-Za-z0-9._-], and not "." or "..", so drivers may use it in paths.
func ValidTaskID(id string) bool {
	return taskIDRE().MatchString(id) && id != "." && id != ".."
}

// ValidateTaskConfig checks the TaskConfig fields common to all drivers: a
// valid ID, absolute task and log directories when set, and valid mounts
// (see validateMounts; keys "mounts[i]"). ServeDriver
// checks every StartTask with it, so drivers can rely on it. Errors are
// *ConfigError values with scope ScopeTask.
func ValidateTaskConfig(plugin string, cfg *driverpb.TaskConfig) error {
	var errs []error
	bad := func(key, problem string) {
		errs = append(errs, &ConfigError{Plugin: plugin, Scope: ScopeTask, Key: key, Problem: problem})
	}
	if cfg == nil {
		bad("id", "no task config given")
		return errors.Join(errs...)
	}
	if !ValidTaskID(cfg.GetId()) {
		bad("id", fmt.Sprintf("%q is not a valid task ID (1-128 characters from [A-Za-z0-9._-])", cfg.GetId()))
	}
	if d := cfg.GetTaskDir(); d != "" && !filepath.IsAbs(d) {
		bad("task_dir", fmt.Sprintf("%q is not an absolute path", d))
	}
	if d := cfg.GetLogDir(); d != "" && !filepath.IsAbs(d) {
		bad("log_dir", fmt.Sprintf("%q is not an absolute path", d))
	}
	errs = append(errs, validateMounts(plugin, cfg.GetMounts())...)
	return errors.Join(errs...)
}
