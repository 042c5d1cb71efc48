package sdk

import (
	"fmt"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/sdk/internal/sdkerr"
)

// Errors a driver returns (wrapped with %w) and a client gets back. Each is
// declared with its gRPC code and wire reason in one place (sdkerr.New): it
// crosses the process boundary as that code plus the reason (see status.go)
// and comes back as the same sentinel, so errors.Is works the same
// in-process and over the plugin connection; and berth's API answers it with
// that code. Reasons are append-only: a client that does not know one just
// sees the code. The sentinels of sdk/executor and sdk/procfs travel the same
// way.
var (
	// ErrPluginShutdown is returned by DriverClient calls when the plugin
	// process has exited or its connection is gone. The call may or may not
	// have taken effect; the caller restarts the plugin and recovers tasks.
	ErrPluginShutdown = sdkerr.New(codes.Unavailable, "PLUGIN_SHUTDOWN", "driver plugin shut down")

	// ErrTaskNotFound is returned by task calls naming a task the driver does
	// not know, and by RecoverTask when the task is gone and how it ended
	// was never recorded.
	ErrTaskNotFound = sdkerr.New(codes.NotFound, "TASK_NOT_FOUND", "task not found")

	// ErrTaskExists is returned by StartTask when the task ID is in use.
	ErrTaskExists = sdkerr.New(codes.AlreadyExists, "TASK_EXISTS", "task already exists")

	// ErrTaskRunning is returned by DestroyTask without force when the task
	// is still running.
	ErrTaskRunning = sdkerr.New(codes.FailedPrecondition, "TASK_RUNNING", "task is still running")

	// ErrTaskNotRunning is returned by SignalTask and ExecTask when the task
	// has already exited.
	ErrTaskNotRunning = sdkerr.New(codes.FailedPrecondition, "TASK_NOT_RUNNING", "task is not running")

	// ErrInvalidConfig is returned when a plugin config, a task's driver
	// config or a TaskConfig field is invalid; the error is (or joins)
	// *ConfigError values naming the plugin and the key.
	ErrInvalidConfig = sdkerr.New(codes.InvalidArgument, "INVALID_CONFIG", "invalid config")

	// ErrInvalidHandle is returned by RecoverTask when the handle was issued
	// by another driver or its driver state cannot be decoded.
	ErrInvalidHandle = sdkerr.New(codes.InvalidArgument, "INVALID_HANDLE", "invalid task handle")

	// ErrInvalidSignal is returned when a signal name is not a known signal.
	ErrInvalidSignal = sdkerr.New(codes.InvalidArgument, "INVALID_SIGNAL", "invalid signal")

	// ErrNotSupported is returned for an optional feature the driver does
	// not have (see DriverCapabilities), e.g. ExecTask without exec.
	ErrNotSupported = sdkerr.New(codes.Unimplemented, "NOT_SUPPORTED", "not supported by driver")

	// ErrRequestTooLarge is returned by DriverClient.StartTask, before
	// sending, when the task's request is over LegacyMaxMessageSize and the
	// plugin negotiated an API older than APIVersionLargeMessages: it may
	// refuse it, and would on every attempt. Retrying does not help: the
	// plugin must be rebuilt with a newer sdk, or the task made smaller.
	ErrRequestTooLarge = sdkerr.New(codes.ResourceExhausted, "REQUEST_TOO_LARGE", "request over the plugin's message limit")

	// ErrDriverUnhealthy is returned by StartTask when the driver cannot run
	// tasks right now (disabled by its plugin config, or unhealthy); its
	// fingerprint says why.
	ErrDriverUnhealthy = sdkerr.New(codes.FailedPrecondition, "DRIVER_UNHEALTHY", "driver is not healthy")

	// ErrIncompatibleAPI is returned by DispenseDriver and LaunchDriver when
	// the plugin speaks no API version this sdk speaks. Retrying does not
	// help: the plugin or berth must be upgraded.
	ErrIncompatibleAPI = sdkerr.New(codes.FailedPrecondition, "INCOMPATIBLE_API", "no common driver API version")

	// ErrTaskStartFailed is returned by StartTask when the driver could not
	// start the task's process on this node: its program is missing or not
	// executable, or its working directory is not there. The error is a
	// *StartError saying which and naming the path. It is FailedPrecondition,
	// not InvalidArgument: the config may be right and the node wrong (a
	// binary not installed here, a directory not created yet), so the same
	// task can start on another node or after the node is fixed. raw_exec's
	// ExecTask returns it too when its command is not in the task's PATH.
	ErrTaskStartFailed = sdkerr.New(codes.FailedPrecondition, "TASK_START_FAILED", "task failed to start")

	// ErrNotPluginProcess is returned by ServeDriver when the process was not
	// started by a go-plugin client with berth's handshake (e.g. run by hand).
	ErrNotPluginProcess = sdkerr.New(codes.FailedPrecondition, "NOT_PLUGIN_PROCESS",
		"not started as a berth driver plugin: this command is run by the berth agent")

	// ErrNotAdapterProcess is returned by ServeStorageAdapter and
	// StorageAdapterEnv when the process was not started by berth as a
	// storage adapter.
	ErrNotAdapterProcess = sdkerr.New(codes.FailedPrecondition, "NOT_ADAPTER_PROCESS",
		"not started as a berth storage adapter: this command is run by the berth agent")
)

// errorReasonDomain scopes the reasons in errdetails.ErrorInfo.
const errorReasonDomain = "driver.berth.dev"

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

// StartReason says why a task's process could not be started. The values
// cross the plugin wire; they are append-only, and a caller treats one it
// does not know (from a newer plugin) as StartOther.
type StartReason string

const (
	// StartNotFound: the program (Path) does not exist, or a directory on
	// its path does not, or a command name was not found in the task's PATH.
	StartNotFound StartReason = "not-found"
	// StartPermissionDenied: the program (Path) exists but may not be
	// executed (no execute bit, a directory on its path not searchable, a
	// noexec mount).
	StartPermissionDenied StartReason = "permission-denied"
	// StartBadWorkingDir: the working directory (Path) is missing, not a
	// directory, or cannot be entered.
	StartBadWorkingDir StartReason = "bad-working-dir"
	// StartOther: anything else (an unreadable binary format, a log file
	// that cannot be opened, no memory); Detail says what.
	StartOther StartReason = "other"
)

// StartError is why StartTask could not start a task's process. It unwraps
// to ErrTaskStartFailed, and crosses the plugin wire whole (see status.go),
// so callers branch on Reason with errors.As, never on the message.
type StartError struct {
	Reason StartReason
	// Path is the file the reason is about: the program, the working
	// directory, or the command name when it was looked up in PATH.
	Path string
	// Detail is the operating system's account, for humans (e.g. "no such
	// file or directory"). It is text on purpose: an errno means little in
	// another process, and what a caller may act on is Reason.
	Detail string
}

// Error implements error.
func (e *StartError) Error() string {
	msg := "task failed to start: " + string(e.Reason)
	if e.Path != "" {
		msg += ": " + e.Path
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns ErrTaskStartFailed.
func (e *StartError) Unwrap() error { return ErrTaskStartFailed }

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

// GRPCCode returns the code the call failed with, so that berth's API
// answers a driver's refusal with the plugin's code (rpc/errcode matches this
// method), even when Err is nil because the error was the driver's own.
func (e *RPCError) GRPCCode() codes.Code { return e.Code }
