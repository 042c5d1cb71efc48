package runhooks

import "errors"

// Unrecoverable marks err, returned by a hook, as one no retry can fix:
// the task (or alloc) asks for something this node cannot give it — a
// plugin socket path longer than a unix socket holds, a block the
// client refuses, a node not configured for it. The task runner fails
// the task at once on an unrecoverable prestart error, whatever its
// restart policy, instead of retrying it after each restart delay (as
// Nomad's restart tracker does with an error not marked recoverable).
// errors.Is and errors.As see through the mark; nil stays nil.
func Unrecoverable(err error) error {
	if err == nil {
		return nil
	}
	return &unrecoverableError{err: err}
}

// IsUnrecoverable reports whether err, or an error it wraps, was marked
// with Unrecoverable.
func IsUnrecoverable(err error) bool {
	var u *unrecoverableError
	return errors.As(err, &u)
}

type unrecoverableError struct{ err error }

func (e *unrecoverableError) Error() string { return e.err.Error() }
func (e *unrecoverableError) Unwrap() error { return e.err }
