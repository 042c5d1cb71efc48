package client

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

// hostFingerprint is fingerprint; tests count its calls.
var hostFingerprint = fingerprint

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
	mhz, source := cpuMHz()
	fp.CpuTotalMhz = mhz * int64(fp.GetCpuCores())
	// Attribute names follow Nomad's, so constraints written for it read
	// the same here ("${attr.kernel.name} = linux").
	a := fp.Attributes
	a["kernel.name"] = runtime.GOOS
	a["os.name"] = runtime.GOOS
	a["cpu.arch"] = runtime.GOARCH
	a["cpu.numcores"] = strconv.Itoa(int(fp.GetCpuCores()))
	a["cpu.frequency"] = strconv.FormatInt(mhz, 10)
	a["cpu.frequency_source"] = source
	a["cpu.totalcompute"] = strconv.FormatInt(fp.GetCpuTotalMhz(), 10)
	a["memory.totalbytes"] = strconv.FormatUint(fp.GetMemoryBytes(), 10)
	a["unique.hostname"] = host
	a["berth.version"] = version.Version
	// berth.binary lets a job run the agent's own binary (the built-in CSI
	// plugin: `berth builtin csi-hostpath`) wherever berth is installed.
	if exe, err := os.Executable(); err == nil {
		a["berth.binary"] = exe
	}
	return fp
}

// defaultCPUMHz is assumed per core when the host reports no frequency
// (some virtual machines), so the node still has schedulable CPU.
const defaultCPUMHz = 1000

// cpuMHz returns one core's frequency in MHz and where it came from: the
// kernel's cpufreq maximum, /proc/cpuinfo's "cpu MHz", or the default.
func cpuMHz() (int64, string) {
	if b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); err == nil {
		if khz, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && khz > 0 {
			return khz / 1000, "cpufreq"
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if mhz, ok := parseCPUInfoMHz(b); ok {
			return mhz, "cpuinfo"
		}
	}
	return defaultCPUMHz, "default"
}

// parseCPUInfoMHz reads the first "cpu MHz" line of /proc/cpuinfo.
func parseCPUInfoMHz(cpuinfo []byte) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f <= 0 {
			return 0, false
		}
		return int64(f), true
	}
	return 0, false
}

// nodeResources is what the scheduler may hand out on this node: the whole
// host less what the operator reserved for the agent and the system.
func nodeResources(fp *pb.NodeFingerprint, reservedCPU, reservedMemMB int64) *pb.NodeResources {
	return &pb.NodeResources{
		CpuMhz:           fp.GetCpuTotalMhz(),
		MemoryMb:         int64(fp.GetMemoryBytes() / (1 << 20)),
		ReservedCpuMhz:   reservedCPU,
		ReservedMemoryMb: reservedMemMB,
	}
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
