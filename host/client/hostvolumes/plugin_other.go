//go:build !unix

package hostvolumes

import "os/exec"

// killGroupOnCancel leaves cmd's cancellation as it is (the process only).
func killGroupOnCancel(*exec.Cmd) {}

// killGroup does nothing: no process groups here.
func killGroup(*exec.Cmd) {}
