// Package logrotate writes a task's output stream to size-bounded files,
// the way drivers store stdout and stderr: "<name>.0", "<name>.1", ... in
// one directory, a new file whenever the current one would exceed the size
// limit, and only the newest MaxFiles files kept.
//
// The index only grows, so the newest file is the one with the highest
// index and readers (berth alloc logs) follow a stream by index. A Writer
// reopened on the same directory continues in the newest file, so a
// restarted task or executor appends rather than overwrites.
package logrotate
