//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system, all threads) this
// process has used so far, and whether the platform reports it.
//
// CPU time per command is the bench's drift-proof figure: when other work
// takes the machine's cores, wall-clock throughput falls for both FSMs alike
// but the CPU a command costs barely moves.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
