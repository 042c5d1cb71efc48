//go:build !linux

package adapters

import "errors"

// The hostpath plugin mounts with Linux system calls.
func serveHostpath() error { return errors.New("the hostpath storage adapter runs on Linux only") }
