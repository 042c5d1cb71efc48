//go:build !unix

package main

import "time"

// processCPU is not available here: the CPU columns print as "–".
func processCPU() (time.Duration, bool) { return 0, false }
