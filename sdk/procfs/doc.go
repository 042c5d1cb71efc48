// Package procfs reads the few facts about Linux processes that drivers
// need from /proc: a process's start time (to recognise it again after its
// PID could have been reused), its state, process group and resource usage.
//
// A process is identified by an Identity, its PID together with its start
// time in clock ticks since boot. A PID alone is not an identity: after a
// process exits the kernel hands its number to the next process, and a
// driver that signals a recycled PID kills an innocent process. Drivers
// record the Identity when they start a process and check it with Alive
// before every signal.
package procfs
