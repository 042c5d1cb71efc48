package agent

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParseConfig checks that ParseConfig never panics, returns either a
// Config or ConfigErrors, reports the same thing for the same input, and
// yields plugin configs that encode as JSON.
func FuzzParseConfig(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "config", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range seeds {
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src, filepath.Ext(p) == ".json")
	}
	for _, s := range []string{
		baseHCL,
		"ports { http = 7646  rpc = 7647 }\nlog_level = \"info\"  log_json = true\n",
		"server { enabled = true } client { enabled = true }",
		"plugin \"x\" { config { a { b \"c\" { d = [1, {e = null}] } } a {} } }",
		"name = \"${\"a\"}\"\ndata_dir = <<EOT\n/x\nEOT\n",
		"server {\n  retry_join = [\"[::1]\", \"h:1\", 1]\n}\n",
		"a = { b = [ }",
		"plugin {}",
		"x = 1e999999\n",
		"client { host_volume \"a\" { path = \"/a\" read_only = true } host_volume \"\" {} host_volume \"a\" { path = 1 } }",
		"limits {\n  http_max_conns_per_client = 7\n  rpc_max_conns_per_client = 0\n  rpc_handshake_timeout = \"2s\"\n  max_request_bytes = \"8MiB\"\n}\n",
	} {
		f.Add([]byte(s), false)
	}
	for _, s := range []string{overrideJSON, `{"plugin": {"a": [{"config": {}}, {"config": {}}]}}`, `{"client": {"host_volume": {"a": [{"path": "/a"}, {"path": "b"}]}}}`, `[{"name": "a"}, {"name": "b"}]`, `{"name": `} {
		f.Add([]byte(s), true)
	}

	f.Fuzz(func(t *testing.T, src []byte, asJSON bool) {
		name := "fuzz.hcl"
		if asJSON {
			name = "fuzz.json"
		}
		c, err := ParseConfig(name, src)
		if (c == nil) == (err == nil) {
			t.Fatalf("ParseConfig returned config %v and error %v; want exactly one", c, err)
		}
		c2, err2 := ParseConfig(name, src)
		if err != nil {
			var errs ConfigErrors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %v (%T) is not a non-empty ConfigErrors", err, err)
			}
			for _, e := range errs {
				if e.Msg == "" {
					t.Errorf("empty message in %+v", e)
				}
				if e.Pos.File != "" && e.Pos.File != name {
					t.Errorf("error names file %q, want %q", e.Pos.File, name)
				}
				if !isKind(e) {
					t.Errorf("%v wraps no Err* kind", e)
				}
			}
			if err2 == nil || err2.Error() != err.Error() {
				t.Errorf("second parse reported %v, first %v", err2, err)
			}
			return
		}
		if !reflect.DeepEqual(c, c2) {
			t.Errorf("two parses of one input differ")
		}
		for name, p := range c.Plugins {
			if _, err := json.Marshal(p.Config); err != nil {
				t.Errorf("plugin %q config does not encode as JSON: %v", name, err)
			}
		}
		merged := DefaultConfig().Merge(c)
		_ = merged.Validate() // must not panic; errors are expected
	})
}

func isKind(err error) bool {
	for _, k := range []error{ErrSyntax, ErrUnknownKey, ErrWrongType, ErrInvalidValue, ErrDuplicateBlock} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}
