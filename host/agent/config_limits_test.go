package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/host/jobspec"
)

// The job limits are read from the server block, in HCL and JSON, sizes
// with or without a unit; what a file leaves out keeps its default.
func TestParseConfigJobLimits(t *testing.T) {
	for _, tc := range []struct{ file, src string }{
		{"agent.hcl", "server {\n  job_max_count = 50\n  job_max_groups = 7\n  job_max_tasks = 9\n  job_max_allocs = 300\n  job_max_size = \"2MiB\"\n}\n"},
		{"agent.json", `{"server": {"job_max_count": 50, "job_max_groups": 7, "job_max_tasks": 9, "job_max_allocs": 300, "job_max_size": 2097152}}`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c, err := ParseConfig(tc.file, []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			want := jobspec.Limits{MaxGroupCount: 50, MaxGroups: 7, MaxTasks: 9, MaxAllocs: 300, MaxBytes: 2 << 20}
			if got := DefaultConfig().Merge(c).Server.JobLimits; got != want {
				t.Fatalf("limits %+v, want %+v", got, want)
			}
		})
	}
	c, err := ParseConfig("agent.hcl", []byte("server {\n  job_max_count = 50\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := jobspec.Limits{}.WithDefaults()
	want.MaxGroupCount = 50
	if got := DefaultConfig().Merge(c).Server.JobLimits; got != want {
		t.Fatalf("limits %+v, want the defaults but for the count: %+v", got, want)
	}
	if got := DefaultConfig().Server.JobLimits; got != (jobspec.Limits{}).WithDefaults() {
		t.Fatalf("default limits %+v", got)
	}
}

func TestParseConfigJobLimitErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
		kind            error
	}{
		{"zero count", "server {\n  job_max_count = 0\n}\n", `agent.hcl:2:19: server.job_max_count: must be at least 1, got 0`, ErrInvalidValue},
		{"negative groups", "server {\n  job_max_groups = -1\n}\n", `agent.hcl:2:20: server.job_max_groups: must be at least 1, got -1`, ErrInvalidValue},
		{"size over every hop", "server {\n  job_max_size = \"64MiB\"\n}\n", `agent.hcl:2:18: server.job_max_size: 67108864 bytes is out of range 1-10485760 (the largest job whose copies - as a JSON request body, the kept versions, a plan - fit the 67108864-byte message limit of the API, raft and plugin hops)`, ErrInvalidValue},
		{"size whose JSON body is over the limit", "server {\n  job_max_size = \"11MiB\"\n}\n", `agent.hcl:2:18: server.job_max_size: 11534336 bytes is out of range 1-10485760 (the largest job whose copies - as a JSON request body, the kept versions, a plan - fit the 67108864-byte message limit of the API, raft and plugin hops)`, ErrInvalidValue},
		{"size without a number", "server {\n  job_max_size = \"big\"\n}\n", `agent.hcl:2:18: server.job_max_size: size "big": write a number with an optional unit`, ErrInvalidValue},
		{"size of the wrong type", "server {\n  job_max_size = true\n}\n", `agent.hcl:2:18: server.job_max_size: size (like "4MiB", or a number of bytes) required, got bool`, ErrWrongType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("agent.hcl", []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.kind) {
				t.Fatalf("ParseConfig = %v, want %v saying %q", err, tc.kind, tc.want)
			}
		})
	}
}

// The limits block is read in HCL and JSON; what a file leaves out keeps
// Nomad's defaults (100 connections per client IP, a 5 s RPC handshake).
func TestParseConfigConnLimits(t *testing.T) {
	for _, tc := range []struct{ file, src string }{
		{"agent.hcl", "limits {\n  http_max_conns_per_client = 7\n  rpc_max_conns_per_client = 0\n  rpc_handshake_timeout = \"2s\"\n  max_request_bytes = \"8MiB\"\n}\n"},
		{"agent.json", `{"limits": {"http_max_conns_per_client": 7, "rpc_max_conns_per_client": 0, "rpc_handshake_timeout": "2s", "max_request_bytes": 8388608}}`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c, err := ParseConfig(tc.file, []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			want := LimitsConfig{HTTPMaxConnsPerClient: 7, RPCMaxConnsPerClient: 0, RPCHandshakeTimeout: 2 * time.Second, MaxRequestBytes: 8 << 20}
			if got := DefaultConfig().Merge(c).Limits; got != want {
				t.Fatalf("limits %+v, want %+v", got, want)
			}
		})
	}
	want := LimitsConfig{HTTPMaxConnsPerClient: 100, RPCMaxConnsPerClient: 100, RPCHandshakeTimeout: 5 * time.Second, MaxRequestBytes: 64 << 20}
	if got := DefaultConfig().Limits; got != want {
		t.Fatalf("default limits %+v, want %+v", got, want)
	}
	for _, tc := range []struct{ name, src, want string }{
		{"negative caps", "limits {\n  rpc_max_conns_per_client = -1\n}\n", `agent.hcl:2:30: limits.rpc_max_conns_per_client: must not be negative`},
		{"request over the message limit", "limits {\n  max_request_bytes = \"65MiB\"\n}\n", `agent.hcl:2:23: limits.max_request_bytes: 68157440 bytes is out of range 1048576-67108864`},
		{"request too small", "limits {\n  max_request_bytes = 1000\n}\n", `agent.hcl:2:23: limits.max_request_bytes: 1000 bytes is out of range`},
		{"timeout of the wrong type", "limits {\n  rpc_handshake_timeout = true\n}\n", `agent.hcl:2:27: limits.rpc_handshake_timeout:`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("agent.hcl", []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseConfig = %v, want %q", err, tc.want)
			}
		})
	}
}

// A server's max_request_bytes must carry a job of its job_max_size.
func TestValidateRequestLimitHoldsAJob(t *testing.T) {
	c := DevConfig()
	c.Server.JobLimits.MaxBytes = 2 << 20
	c.Limits.MaxRequestBytes = 2 << 20
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "limits.max_request_bytes: 2097152 bytes cannot carry a job of server.job_max_size (2097152 bytes)") || !errors.Is(err, ErrInvalidValue) {
		t.Fatalf("Validate = %v", err)
	}
	c.Limits.MaxRequestBytes = 3 << 20
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate with room for the job: %v", err)
	}
}
