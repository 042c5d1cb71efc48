package main

import (
	"strings"
	"testing"
)

// The node simulator (bench/nodesim) is a program and may import host/;
// another package under bench may not.
func TestOnlyTheProgramsUnderBenchImportHost(t *testing.T) {
	overlay := map[string][]byte{
		"bench/nodesim/zz_planted.go": []byte("package main\n\nimport \"berth.dev/berth/host/client\"\n\nvar _ = client.New\n"),
		"bench/zzlib/lib.go":          []byte("package zzlib\n\nimport \"berth.dev/berth/host/client\"\n\nvar _ = client.New\n"),
	}
	got, err := check(repoRoot, overlay)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(got, "\n")
	if strings.Contains(joined, "bench/nodesim/") {
		t.Errorf("bench/nodesim flagged for importing host/:\n%s", joined)
	}
	if want := `bench/zzlib/lib.go:3:8: bench/zzlib must not import "berth.dev/berth/host/client"`; !strings.Contains(joined, want) {
		t.Errorf("missing %q in:\n%s", want, joined)
	}
}
