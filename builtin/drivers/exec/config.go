package execdriver

import (
	"maps"
	"slices"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// Name is the driver's name in job specs.
const Name = "exec"

// defaultChrootEnv is what a task's root gets from the host when the
// plugin config names nothing else: host path → task path, bind-mounted
// read-only. Paths the host lacks are skipped.
var defaultChrootEnv = map[string]string{
	"/bin": "/bin", "/etc": "/etc", "/lib": "/lib", "/lib32": "/lib32", "/lib64": "/lib64",
	"/sbin": "/sbin", "/usr": "/usr",
}

var pluginSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "enabled", Type: sdk.TypeBool, Default: sdk.BoolValue(false),
		Description: "allow exec tasks (the plugin must run as root)"},
	{Name: "chroot_env", Type: sdk.TypeMap, Default: sdk.MapValue(defaultChrootEnv),
		Description: "host path → task path bind-mounted read-only into every task's root"},
}}

var taskSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "command", Type: sdk.TypeString, Required: true, Description: "program to run, inside the task's root; looked up in PATH when it has no slash"},
	{Name: "args", Type: sdk.TypeList, Description: "arguments"},
	{Name: "cwd", Type: sdk.TypeString, Description: "working directory inside the task's root (default /, the task directory)"},
	{Name: "cap_add", Type: sdk.TypeList, Description: "capabilities added to the default set (names like NET_ADMIN, or all)"},
	{Name: "cap_drop", Type: sdk.TypeList, Description: "capabilities removed from the default set (names, or all)"},
	{Name: "no_new_privs", Type: sdk.TypeBool, Default: sdk.BoolValue(true),
		Description: "set no_new_privs: setuid binaries and file capabilities grant nothing"},
}}

func taskSpec() sdk.ConfigSpec {
	return sdk.ConfigSpec{Plugin: Name, Scope: sdk.ScopeTaskConfig, Schema: taskSchema}
}

func pluginSpec() sdk.ConfigSpec {
	return sdk.ConfigSpec{Plugin: Name, Scope: sdk.ScopePlugin, Schema: pluginSchema}
}

// pluginConfig is the validated plugin config.
type pluginConfig struct {
	enabled bool
	// chrootEnv is sorted by task path, parents first.
	chrootEnv [][2]string
}

func parsePluginConfig(cfg *driverpb.PluginConfig) (pluginConfig, error) {
	vals, err := pluginSpec().Validate(cfg.GetValues())
	if err != nil {
		return pluginConfig{}, err
	}
	env := defaultChrootEnv
	if vals.Has("chroot_env") {
		env = vals.Map("chroot_env")
	}
	pc := pluginConfig{enabled: vals.Bool("enabled")}
	for _, host := range slices.Sorted(maps.Keys(env)) {
		task := env[host]
		if err := checkChrootPath(host); err != nil {
			return pluginConfig{}, &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopePlugin, Key: "chroot_env", Problem: "host path " + err.Error()}
		}
		if err := checkChrootPath(task); err != nil || task == "/" {
			problem := "task path " + task + " must be an absolute path other than /"
			if err != nil {
				problem = "task path " + err.Error()
			}
			return pluginConfig{}, &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopePlugin, Key: "chroot_env", Problem: problem}
		}
		pc.chrootEnv = append(pc.chrootEnv, [2]string{host, task})
	}
	return pc, nil
}

// TaskSchema is the schema of this driver's task config, for tools that
// check a job without starting the driver (the CLI's job validate).
func TaskSchema() *driverpb.Schema { return taskSchema }
