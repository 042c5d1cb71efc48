package sdk

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/sdk/executor"
	"berth.dev/berth/sdk/procfs"
)

// Errors a driver returns (wrapped with %w) and a client gets back: each
// crosses the process boundary as a gRPC code plus a reason (see status.go),
// so errors.Is works the same in-process and over the plugin connection.
var (
	// ErrPluginShutdown is returned by DriverClient calls when the plugin
	// process has exited or its connection is gone. The call may or may not
	// have taken effect; the caller restarts the plugin and recovers tasks.
	ErrPluginShutdown = errors.New("driver plugin shut down")

	// ErrTaskNotFound is returned by task calls naming a task the driver does
	// not know, and by RecoverTask when the task is gone and how it ended
	// was never recorded.
	ErrTaskNotFound = errors.New("task not found")

	// ErrTaskExists is returned by StartTask when the task ID is in use.
	ErrTaskExists = errors.New("task already exists")

	// ErrTaskRunning is returned by DestroyTask without force when the task
	// is still running.
	ErrTaskRunning = errors.New("task is still running")

	// ErrTaskNotRunning is returned by SignalTask and ExecTask when the task
	// has already exited.
	ErrTaskNotRunning = errors.New("task is not running")

	// ErrInvalidConfig is returned when a plugin config, a task's driver
	// config or a TaskConfig field is invalid; the error is (or joins)
	// *ConfigError values naming the plugin and the key.
	ErrInvalidConfig = errors.New("invalid config")

	// ErrInvalidHandle is returned by RecoverTask when the handle was issued
	// by another driver or its driver state cannot be decoded.
	ErrInvalidHandle = errors.New("invalid task handle")

	// ErrInvalidSignal is returned when a signal name is not a known signal.
	ErrInvalidSignal = errors.New("invalid signal")

	// ErrNotSupported is returned for an optional feature the driver does
	// not have (see DriverCapabilities), e.g. ExecTask without exec.
	ErrNotSupported = errors.New("not supported by driver")

	// ErrDriverUnhealthy is returned by StartTask when the driver cannot run
	// tasks right now (disabled by its plugin config, or unhealthy); its
	// fingerprint says why.
	ErrDriverUnhealthy = errors.New("driver is not healthy")

	// ErrIncompatibleAPI is returned by DispenseDriver and LaunchDriver when
	// the plugin speaks no API version this sdk speaks.
	ErrIncompatibleAPI = errors.New("no common driver API version")

	// ErrNotPluginProcess is returned by ServeDriver when the process was not
	// started by a go-plugin client with berth's handshake (e.g. run by hand).
	ErrNotPluginProcess = errors.New("not started as a berth driver plugin: this command is run by the berth agent")
)

// errorReasonDomain scopes the reasons in errdetails.ErrorInfo.
const errorReasonDomain = "driver.berth.dev"

// wireError says how a sentinel travels: its gRPC code and a reason that
// tells sentinels sharing a code apart.
type wireError struct {
	err    error
	code   codes.Code
	reason string
}

// wireErrors is the one table both directions use. Order matters only for
// errors wrapping several sentinels: the first match wins. Every exported
// sentinel under sdk/ has a row, subpackages' included, so none crosses the
// plugin boundary as Unknown by omission (a test in rpc/errcode checks it;
// sdk cannot import rpc/errcode, so this table is sdk's own). Reasons are
// append-only: a client that does not know one just sees the code.
var wireErrors = []wireError{
	{ErrPluginShutdown, codes.Unavailable, "PLUGIN_SHUTDOWN"},
	{ErrTaskNotFound, codes.NotFound, "TASK_NOT_FOUND"},
	{ErrTaskExists, codes.AlreadyExists, "TASK_EXISTS"},
	{ErrTaskRunning, codes.FailedPrecondition, "TASK_RUNNING"},
	{ErrTaskNotRunning, codes.FailedPrecondition, "TASK_NOT_RUNNING"},
	{ErrDriverUnhealthy, codes.FailedPrecondition, "DRIVER_UNHEALTHY"},
	{ErrIncompatibleAPI, codes.FailedPrecondition, "INCOMPATIBLE_API"},
	{ErrInvalidConfig, codes.InvalidArgument, "INVALID_CONFIG"},
	{ErrInvalidHandle, codes.InvalidArgument, "INVALID_HANDLE"},
	{ErrInvalidSignal, codes.InvalidArgument, "INVALID_SIGNAL"},
	{ErrNotSupported, codes.Unimplemented, "NOT_SUPPORTED"},
	{ErrConfigJSON, codes.InvalidArgument, "CONFIG_JSON"},
	{ErrNotPluginProcess, codes.FailedPrecondition, "NOT_PLUGIN_PROCESS"},
	{executor.ErrLost, codes.NotFound, "TASK_LOST"},
	{executor.ErrExited, codes.FailedPrecondition, "TASK_EXITED"},
	{procfs.ErrNoProcess, codes.NotFound, "NO_PROCESS"},
	// A /proc line berth cannot parse is berth's bug (or a kernel it does
	// not know), not the caller's.
	{procfs.ErrBadStat, codes.Internal, "BAD_PROC_STAT"},
}

// ConfigScope says which config a ConfigError is about.
type ConfigScope string

const (
	// ScopePlugin is the plugin config (agent config, SetConfig).
	ScopePlugin ConfigScope = "plugin config"
	// ScopeTaskConfig is a task's driver config (TaskConfig.driver_config).
	ScopeTaskConfig ConfigScope = "task config"
	// ScopeTask is a TaskConfig field common to all drivers (id, task_dir).
	ScopeTask ConfigScope = "task"
)

// ConfigError is one invalid key of a config. It unwraps to ErrInvalidConfig.
type ConfigError struct {
	// Plugin is the driver's name.
	Plugin string
	Scope  ConfigScope
	Key    string
	// Problem says what is wrong with the key, e.g. "required key is missing".
	Problem string
}

// Error implements error.
func (e *ConfigError) Error() string {
	plugin := e.Plugin
	if plugin == "" {
		plugin = "driver"
	}
	return fmt.Sprintf("%s %s: key %q: %s", plugin, e.Scope, e.Key, e.Problem)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// RPCError is an error a DriverClient call returns for a failed RPC. It names
// the plugin and the method and unwraps to the sentinel the plugin returned
// (or ErrPluginShutdown), or to nothing when the error is the driver's own.
type RPCError struct {
	Plugin string
	Method string
	// Code is the gRPC code the call failed with.
	Code codes.Code
	// Message is the plugin's error message.
	Message string
	// Err is the sentinel (or joined *ConfigError values) this error stands
	// for, or nil.
	Err error
}

// Error implements error.
func (e *RPCError) Error() string {
	return fmt.Sprintf("driver %s: %s: %s", e.Plugin, e.Method, e.Message)
}

// Unwrap returns the sentinel this error stands for.
func (e *RPCError) Unwrap() error { return e.Err }
