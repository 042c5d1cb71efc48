package agent

import (
	"errors"
	"strings"
	"testing"
)

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		src  string
		want string // the whole error text, one problem per line
		kind error  // every reported problem wraps it
		path string // the first problem's field path
	}{
		{
			name: "unknown top-level key",
			file: "agent.hcl",
			src:  "name = \"a\"\nnmae = \"b\"\n",
			want: `agent.hcl:2:1: unknown key "nmae" (did you mean "name"?)`,
			kind: ErrUnknownKey, path: "nmae",
		},
		{
			name: "unknown key in a block",
			file: "agent.hcl",
			src:  "server {\n  enabled = true\n\n  bootstap_expect = 3\n}\n",
			want: `agent.hcl:4:3: unknown key "bootstap_expect" in server block (did you mean "bootstrap_expect"?)`,
			kind: ErrUnknownKey, path: "server.bootstap_expect",
		},
		{
			name: "unknown key without a near miss",
			file: "agent.hcl",
			src:  "client {\n  datacenter = \"dc1\"\n}\n",
			want: `agent.hcl:2:3: unknown key "datacenter" in client block`,
			kind: ErrUnknownKey, path: "client.datacenter",
		},
		{
			name: "unknown key in a plugin block",
			file: "agent.hcl",
			src:  "plugin \"raw_exec\" {\n  confg {}\n}\n",
			want: `agent.hcl:2:3: unknown key "confg" in plugin "raw_exec" block (did you mean "config"?)`,
			kind: ErrUnknownKey, path: "plugin.raw_exec.confg",
		},
		{
			name: "wrong type",
			file: "agent.hcl",
			src:  "name = \"a\"\ndata_dir = 12\n",
			want: `agent.hcl:2:12: data_dir: string required, got number`,
			kind: ErrWrongType, path: "data_dir",
		},
		{
			name: "wrong type in a list entry",
			file: "agent.hcl",
			src:  "client {\n  servers = [\"a\", true]\n}\n",
			want: `agent.hcl:2:19: client.servers[1]: string required, got bool`,
			kind: ErrWrongType, path: "client.servers[1]",
		},
		{
			name: "wrong type in a JSON list entry",
			file: "agent.json",
			src:  `{"client": {"servers": ["a", true]}}`,
			want: `agent.json:1:30: client.servers[1]: string required, got bool`,
			kind: ErrWrongType, path: "client.servers[1]",
		},
		{
			name: "fraction where a whole number belongs",
			file: "agent.hcl",
			src:  "server {\n  bootstrap_expect = 1.5\n}\n",
			want: `agent.hcl:2:22: server.bootstrap_expect: whole number required, got 1.5`,
			kind: ErrWrongType, path: "server.bootstrap_expect",
		},
		{
			name: "argument where a block belongs",
			file: "agent.hcl",
			src:  "server = { enabled = true }\n",
			want: `agent.hcl:1:1: server: block required, got argument (write server { ... } without =)`,
			kind: ErrWrongType, path: "server",
		},
		{
			name: "bad duration",
			file: "agent.hcl",
			src:  "server {\n  retry_interval = \"5x\"\n}\n",
			want: `agent.hcl:2:20: server.retry_interval: invalid duration "5x" (want a number and a unit, like "500ms", "5s", "2m" or "1h")`,
			kind: ErrInvalidValue, path: "server.retry_interval",
		},
		{
			name: "duration as a number",
			file: "agent.json",
			src:  "{\n  \"server\": {\n    \"heartbeat_ttl\": 10\n  }\n}\n",
			want: `agent.json:3:22: server.heartbeat_ttl: duration string (like "5s") required, got number`,
			kind: ErrWrongType, path: "server.heartbeat_ttl",
		},
		{
			name: "gc_percent out of range",
			file: "agent.hcl",
			src:  "server {\n  enabled = true\n  gc_percent = 5\n}\n",
			want: `agent.hcl:3:16: server.gc_percent: 5 is out of range 10-10000`,
			kind: ErrInvalidValue, path: "server.gc_percent",
		},
		{
			name: "gc_percent as GOGC's off",
			file: "agent.json",
			src:  "{\n  \"server\": {\n    \"gc_percent\": \"off\"\n  }\n}\n",
			want: `agent.json:3:19: server.gc_percent: whole number required, got string`,
			kind: ErrWrongType, path: "server.gc_percent",
		},
		{
			name: "bad port",
			file: "agent.hcl",
			src:  "ports {\n  http = 7646\n  rpc  = 70000\n}\n",
			want: `agent.hcl:3:10: ports.rpc: 70000 is out of range 1-65535`,
			kind: ErrInvalidValue, path: "ports.rpc",
		},
		{
			name: "bad port in compact style",
			file: "agent.hcl",
			src:  "ports { http = 7646  rpc = 0  raft = 7648 }\nlog_level = \"info\"   log_json = 1\n",
			want: "agent.hcl:1:28: ports.rpc: 0 is out of range 1-65535\n" +
				"agent.hcl:2:33: log_json: bool required, got number",
			kind: nil, path: "ports.rpc",
		},
		{
			name: "duplicate block",
			file: "agent.hcl",
			src:  "server {\n  enabled = true\n}\n\nserver {\n  enabled = false\n}\n",
			want: `agent.hcl:5:1: duplicate server block (first defined at agent.hcl:1:1)`,
			kind: ErrDuplicateBlock, path: "server",
		},
		{
			name: "duplicate plugin block",
			file: "agent.hcl",
			src:  "plugin \"raw_exec\" {}\nplugin \"mock\" {}\nplugin \"raw_exec\" {}\n",
			want: `agent.hcl:3:1: duplicate plugin "raw_exec" block (first defined at agent.hcl:1:1)`,
			kind: ErrDuplicateBlock, path: "plugin.raw_exec",
		},
		{
			name: "a list of blocks in JSON",
			file: "agent.json",
			src:  "{\n  \"server\": [{\"enabled\": true}, {\"enabled\": false}]\n}",
			want: `agent.json:2:3: duplicate server block (a list of them is given; only one is allowed)`,
			kind: ErrDuplicateBlock, path: "server",
		},
		{
			name: "JSON root array",
			file: "agent.json",
			src:  "\n  [{\"name\": \"a\"}]",
			want: `agent.json:2:3: the root of a JSON configuration must be an object, not an array`,
			kind: ErrWrongType,
		},
		{
			name: "malformed HCL",
			file: "agent.hcl",
			src:  "name = \"a\"\nserver {\n  enabled = \n}\n",
			want: `agent.hcl:3:13: syntax error: Invalid expression: Expected the start of an expression, but found an invalid expression token.`,
			kind: ErrSyntax,
		},
		{
			name: "malformed JSON",
			file: "agent.json",
			src:  "{\"name\": \"a\",}",
			want: `agent.json:1:13: syntax error: Trailing comma in object: JSON does not permit a trailing comma after the final property in an object.`,
			kind: ErrSyntax,
		},
		{
			name: "variables are not available",
			file: "agent.hcl",
			src:  "data_dir = env.HOME\n",
			want: `agent.hcl:1:12: data_dir: Variables not allowed: Variables may not be used here.`,
			kind: ErrInvalidValue, path: "data_dir",
		},
		{
			name: "bad server address",
			file: "agent.hcl",
			src:  "server {\n  retry_join = [\"10.0.0.1\", \"http://10.0.0.2\"]\n}\n",
			want: `agent.hcl:2:29: server.retry_join[1]: "http://10.0.0.2" is not host or host:port (leave out the scheme)`,
			kind: ErrInvalidValue, path: "server.retry_join[1]",
		},
		{
			name: "every problem is reported in file order",
			file: "agent.json",
			src: `{
  "nmae": "a",
  "server": {"enabled": "yes", "bootstrap_expect": 3, "tll": "1s"},
  "log_level": "loud"
}`,
			want: "agent.json:2:3: unknown key \"nmae\" (did you mean \"name\"?)\n" +
				"agent.json:3:25: server.enabled: bool required, got string\n" +
				"agent.json:3:55: unknown key \"tll\" in server block\n" +
				"agent.json:4:16: log_level: \"loud\" is not a log level (want one of trace, debug, info, warn, error)",
			path: "nmae",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(tc.file, []byte(tc.src))
			if err == nil {
				t.Fatalf("ParseConfig succeeded with %+v, want error %q", c, tc.want)
			}
			if c != nil {
				t.Errorf("ParseConfig returned a config along with the error")
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("error:\n got: %s\nwant: %s", got, tc.want)
			}
			var errs ConfigErrors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, want ConfigErrors", err)
			}
			if n := strings.Count(tc.want, "\n") + 1; len(errs) != n {
				t.Errorf("got %d problems, want %d", len(errs), n)
			}
			if errs[0].Path != tc.path {
				t.Errorf("Path = %q, want %q", errs[0].Path, tc.path)
			}
			if tc.kind != nil {
				for _, e := range errs {
					if !errors.Is(e, tc.kind) {
						t.Errorf("%q does not wrap %v", e, tc.kind)
					}
				}
			}
		})
	}
}

func TestParseConfigErrorKindsUnwrap(t *testing.T) {
	_, err := ParseConfig("a.hcl", []byte("server {\n  retry_interval = \"soon\"\n}\nbogus = 1\n"))
	if !errors.Is(err, ErrInvalidValue) || !errors.Is(err, ErrUnknownKey) {
		t.Errorf("errors.Is through ConfigErrors failed for %v", err)
	}
	if errors.Is(err, ErrSyntax) {
		t.Errorf("error %v claims to be a syntax error", err)
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Pos != (SourcePos{File: "a.hcl", Line: 2, Column: 20}) {
		t.Errorf("first *ConfigError = %+v, want one at a.hcl:2:20", ce)
	}
}
