package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, src := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCheckFindsEachViolation(t *testing.T) {
	root := writeTree(t, map[string]string{
		"fsm/a.go":            "package fsm\nimport (\n\"net\"\n\"time\"\n)\nvar _ = net.IPv4len\nfunc f() { _ = time.Now() }\n",
		"fsm/b.go":            "package fsm\nimport clock \"time\"\nfunc g() { clock.Sleep(1) }\n",
		"fsm/rand.go":         "package fsm\nimport \"math/rand/v2\"\nvar _ = rand.Int\n",
		"fsm/ok_test.go":      "package fsm\nimport \"time\"\nvar _ = time.Now\n",
		"sdk/x.go":            "package sdk\nimport \"berth.dev/berth/fsm\"\nvar _ = fsm.X\n",
		"sdk/y.go":            "package sdk\nimport \"berth.dev/berth/sdk/driverpb\"\nvar _ = driverpb.X\n",
		"csi/c.go":            "package csi\nimport \"berth.dev/berth/host/server\"\nvar _ = server.X\n",
		"host/client/c.go":    "package client\nimport \"berth.dev/berth/host/server\"\nvar _ = server.X\n",
		"host/scheduler/s.go": "package scheduler\nimport \"os\"\nvar _ = os.Args\n",
	})
	got, err := check(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`fsm/a.go:3:1: fsm must not import "net"`,
		`fsm/a.go:7:16: fsm must not call time.Now`,
		`fsm/b.go:3:12: fsm must not call time.Sleep`,
		`fsm/rand.go:2:8: fsm must not import "math/rand/v2"`,
		`sdk/x.go:2:8: sdk/ must not import "berth.dev/berth/fsm"`,
		`csi/c.go:2:8: csi must not import "berth.dev/berth/host/server"`,
		`host/scheduler/s.go:2:8: host/scheduler must not import "os"`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	joined := strings.Join(got, "\n")
	for _, w := range want {
		if !strings.Contains(joined, w) {
			t.Errorf("missing violation %q in:\n%s", w, joined)
		}
	}
}

func TestCheckCleanTree(t *testing.T) {
	root := writeTree(t, map[string]string{
		"fsm/a.go":          "package fsm\nimport \"time\"\nvar d time.Duration\n",
		"host/cli/a.go":     "package cli\nimport \"berth.dev/berth/host/agent\"\nvar _ = agent.X\n",
		"main.go":           "package main\nimport \"berth.dev/berth/host/cli\"\nvar _ = cli.X\n",
		"examples/x/x.go":   "package x\nimport \"berth.dev/berth/host/cli\"\nvar _ = cli.X\n",
		"fsm/testdata/t.go": "package t\nimport \"net\"\nvar _ = net.IPv4len\n",
	})
	got, err := check(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("clean tree reported violations:\n%s", strings.Join(got, "\n"))
	}
}
