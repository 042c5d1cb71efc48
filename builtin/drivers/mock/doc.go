// Package mock is a task driver whose tasks are timers: what a task does is
// set by its task config, so tests of berth's client (restarts, stops,
// plugin crashes, unhealthy drivers) can stage any behaviour without
// running real processes.
//
// Task config (all optional):
//
//	run_for                 duration  exit after this long (absent: run until stopped)
//	exit_code               int       exit code when run_for elapses (default 0)
//	exit_signal             string    report the task as killed by this signal instead
//	exit_error              string    report this error with the exit
//	start_error             string    StartTask fails with this message
//	start_block_for         duration  StartTask blocks this long (or until its context ends)
//	ignore_stop_signal      bool      the stop signal is ignored; only the kill after the timeout ends the task
//	crash_plugin_after      duration  the plugin process crashes this long after the task starts
//	driver_unhealthy_after  duration  the driver turns unhealthy this long after the task starts
//
// Plugin config: unhealthy_after (duration; the driver turns unhealthy this
// long after SetConfig) and attributes (map; added to the fingerprint).
//
// Signals behave like a process's default dispositions: SIGKILL always
// ends a task; SIGTERM, SIGINT, SIGQUIT and SIGHUP end it unless
// ignore_stop_signal; other signals are recorded (InspectTask attribute
// "signals", a task event) and otherwise ignored.
//
// Mock advertises mount_volumes and records a task's mounts, as given, in
// its InspectTask attribute "mounts" (MountsAttribute; decode it with
// Mounts), so tests can assert what reached the driver.
//
// Tasks survive a plugin restart: RecoverTask rebuilds a task from its
// handle and the time it started, so a task with run_for exits on schedule
// (or at once, if that time has passed). A recovered task does not crash
// the plugin again.
package mock
