// Package sleep is an example berth task driver whose tasks sleep: a task
// runs for its configured duration and exits with its configured code.
// It shows what a third-party driver needs and nothing more: a schema for
// each config, the sdk's bookkeeping helpers (TaskStore, EventHub,
// FingerprintHub), the sdk's error sentinels, recovery from a handle, and
// the drivertest conformance harness in its tests.
//
// Task config:
//
//	duration   duration  required; how long the task sleeps
//	exit_code  int       exit code when it wakes (default 0)
//
// Plugin config:
//
//	max_duration  duration  refuse tasks that would sleep longer
//
// SIGTERM, SIGINT, SIGHUP and SIGKILL end a task as if it were killed by
// them; other signals are recorded as task events. A task survives a
// plugin restart: RecoverTask wakes it on its original schedule.
package sleep
