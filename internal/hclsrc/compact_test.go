package hclsrc

import (
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

func TestSplitCompactHCL(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{
			name: "several arguments on a line",
			src:  "log_level = \"info\"   log_json = false\n",
			want: "log_level = \"info\"   \nlog_json = false\n",
		},
		{
			name: "single-line block with several arguments",
			src:  "ports { http = 7646  rpc = 7647  raft = 7648 }   # the defaults\n",
			want: "ports {\n http = 7646  \nrpc = 7647  \nraft = 7648 \n}   # the defaults\n",
		},
		{
			name: "blocks after each other on a line",
			src:  "server { enabled = true } client { enabled = true }\n",
			want: "server {\n enabled = true \n} \nclient {\n enabled = true \n}\n",
		},
		{
			name: "argument after a list and an object",
			src:  "a = [1, 2] b = { x = 1 } c = f(1) d = 2\n",
			want: "a = [1, 2] \nb = { x = 1 } \nc = f(1) \nd = 2\n",
		},
		{
			name: "block after an argument",
			src:  "name = \"a\" plugin \"raw_exec\" { config { enabled = true } }\n",
			want: "name = \"a\" \nplugin \"raw_exec\" {\n config {\n enabled = true \n} \n}\n",
		},
		{
			name: "nested single-line blocks",
			src:  "plugin \"x\" { config { a = 1 } }",
			want: "plugin \"x\" {\n config {\n a = 1 \n} \n}",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, split := SplitCompact([]byte(tc.src), "a.hcl")
			if string(got) != tc.want {
				t.Errorf("split:\n got: %q\nwant: %q", got, tc.want)
			}
			if split == nil {
				t.Fatalf("no LineSplit returned for a changed source")
			}
			if _, diags := hclsyntax.ParseConfig(got, "a.hcl", hcl.InitialPos); diags.HasErrors() {
				t.Errorf("split source does not parse: %v", diags)
			}
		})
	}
}

// Files that are already valid HCL 2 must reach the parser byte for byte,
// except single-line blocks, which are valid in both forms.
func TestSplitCompactHCLLeavesValidHCLAlone(t *testing.T) {
	for _, src := range []string{
		"name = \"a\"\n",
		"server {\n  enabled = true\n  retry_join = [\n    \"a\",\n    \"b\",\n  ]\n}\n",
		"a = { x = 1, y = { z = [1, 2] } }\n",
		"a = {\n  x = 1\n  y = 2\n}\n",
		"multi label \"x\" y {\n  a = b.c\n}\n",
		"a = x ? y : z\n",
		"a = \"${foo} and %{ if x }{}%{ endif }\"\n",
		"a = <<EOT\nline { with = braces } b = 1\nEOT\nb = 2\n",
		"a = <<-EOT\n  x\n  EOT\nb = 2\n",
		"a = 1 # comment b = 2\n/* block\ncomment */ b = 2\n",
		"a = 1 // b = 2\n",
		"empty {}\n",
		"a = [for k, v in x : k => v if v]\n",
		"a = {for k, v in x : k => v}\nb = 1\n",
	} {
		got, split := SplitCompact([]byte(src), "a.hcl")
		if split != nil || string(got) != src {
			t.Errorf("SplitCompact changed valid HCL\n src: %q\n got: %q", src, got)
		}
	}
}

// Unbalanced input is left for the parser to report on the original text.
func TestSplitCompactHCLUnbalanced(t *testing.T) {
	for _, src := range []string{"a { b = 1\n", "a = 1 }\n", "a = [1 }\n", "a = \"${x\"\n"} {
		got, split := SplitCompact([]byte(src), "a.hcl")
		if split != nil || string(got) != src {
			t.Errorf("SplitCompact(%q) = %q, want it unchanged", src, got)
		}
	}
}
