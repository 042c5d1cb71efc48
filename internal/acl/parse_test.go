package acl

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseReadsEveryResource(t *testing.T) {
	src := `
job      { policy = "read"  capabilities = ["submit-job", "alloc-lifecycle"] }
volume   { capabilities = ["csi-read-volume", "csi-mount-volume", "csi-mount-volume"] }
plugin   { policy = "list" }
node     { policy = "write" }
operator { policy = "deny" }
agent    { capabilities = ["read"] }
`
	p, err := Parse("p.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[Resource]Rule{
		Job:      {Policy: "read", Capabilities: []Capability{SubmitJob, AllocLifecycle}},
		Volume:   {Capabilities: []Capability{CSIReadVolume, CSIMountVolume}},
		Plugin:   {Policy: "list"},
		Node:     {Policy: "write"},
		Operator: {Policy: "deny"},
		Agent:    {Capabilities: []Capability{CapRead}},
	}
	for r, w := range want {
		got := p.Rules[r]
		if got.Policy != w.Policy || !slices.Equal(got.Capabilities, w.Capabilities) {
			t.Errorf("%s: got %+v, want %+v", r, got, w)
		}
	}
}

func TestParseJSON(t *testing.T) {
	p, err := Parse("p.json", []byte(`{"volume": {"policy": "write"}, "job": {"capabilities": ["read-job"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Rules[Volume].Policy != "write" || !slices.Equal(p.Rules[Job].Capabilities, []Capability{ReadJob}) {
		t.Fatalf("got %+v", p.Rules)
	}
}

// TestParseErrors pins each problem's position, path and kind.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // substrings, one per error line, in order
		kind      error
	}{
		{"syntax", "job {\n", []string{"p.hcl:1:"}, ErrSyntax},
		{"unknown resource", "namespace \"x\" {\n policy = \"read\"\n}\n", []string{"p.hcl:1:1", "unknown key"}, ErrUnknownKey},
		{"unknown key", "job {\n  polcy = \"read\"\n}\n", []string{"p.hcl:2:3: job.polcy", `did you mean "policy"`}, ErrUnknownKey},
		{"bad disposition", "job {\n  policy = \"scale\"\n}\n", []string{"p.hcl:2:12: job.policy", `"scale" is not a policy of job; one of deny, read, write`}, ErrInvalidPolicy},
		{"list only for plugin", "node { policy = \"list\" }", []string{"p.hcl:1:17: node.policy"}, ErrInvalidPolicy},
		{"bad capability", "volume {\n  capabilities = [\"csi-mount-volume\", \"csi-mount-volumes\"]\n}\n", []string{"p.hcl:2:18: volume.capabilities[1]", `did you mean "csi-mount-volume"`}, ErrInvalidPolicy},
		{"capability of another resource", "job { capabilities = [\"csi-mount-volume\"] }", []string{"job.capabilities[0]", `"csi-mount-volume" is not a capability of job`}, ErrInvalidPolicy},
		{"wrong type", "job { policy = 3 }", []string{"p.hcl:1:16: job.policy"}, ErrWrongType},
		{"empty rule", "agent {\n}\n", []string{"p.hcl:1:1: agent", "needs a policy or capabilities"}, ErrInvalidPolicy},
		{"duplicate", "job { policy = \"read\" }\njob { policy = \"write\" }\n", []string{"p.hcl:2:1", "first at p.hcl:1:1"}, ErrInvalidPolicy},
		{"not utf8", "job { policy = \"\xff\" }", []string{"p.hcl:1:1", "UTF-8"}, ErrSyntax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.hcl", []byte(tc.src))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("error %q is not %v", err, tc.kind)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	_, err := Parse("p.hcl", []byte("job { policy = \"x\" }\nvolume { capabilities = [\"y\"] }\n"))
	if err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Fatalf("want two problems, got %v", err)
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"anonymous", "read-only_2", strings.Repeat("a", 128)} {
		if err := ValidName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "a/b", strings.Repeat("a", 129), "é"} {
		if err := ValidName(bad); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%q: got %v", bad, err)
		}
	}
}
