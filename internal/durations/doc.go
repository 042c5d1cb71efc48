// Package durations converts the millisecond durations of jobs and
// requests (kill_timeout_ms, a restart's delay_ms, a drain's deadline_ms)
// to time without overflow.
//
// Validation holds every such field to MaxMs (jobspec, and the API
// endpoints that take one); the conversions here saturate all the same,
// since a value stored before that rule, or a deadline added to a time far
// in the future, must not wrap into the past.
package durations
