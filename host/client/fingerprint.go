package client

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/version"
)

// fingerprint describes this host. Errors reading optional facts (memory)
// leave them zero rather than failing registration.
func fingerprint() *pb.NodeFingerprint {
	host, _ := os.Hostname()
	fp := &pb.NodeFingerprint{
		Hostname:     host,
		Os:           runtime.GOOS,
		Arch:         runtime.GOARCH,
		CpuCores:     int32(runtime.NumCPU()),
		BerthVersion: version.Version,
		Attributes:   map[string]string{},
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if mem, err := parseMemTotal(b); err == nil {
			fp.MemoryBytes = mem
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		fp.Attributes["kernel.version"] = strings.TrimSpace(string(b))
	}
	return fp
}

// parseMemTotal reads MemTotal (in kB) from /proc/meminfo content.
func parseMemTotal(meminfo []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("MemTotal %q: %w", fields[1], err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no MemTotal line in meminfo")
}
