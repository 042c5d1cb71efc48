package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/pb"
)

// TestFlagsAfterTheAllocIDAreFlags is the report's case: `alloc logs ALLOC
// -f` followed the log rather than asking for a task named "-f", and
// `alloc logs ALLOC TASK -stderr -c 5` reads the task's stderr. A "--"
// still ends the flags: what follows is the task name, whatever it looks
// like.
func TestFlagsAfterTheAllocIDAreFlags(t *testing.T) {
	f := newFakeCluster(t)
	f.allocs[allocA] = runningAlloc()
	f.logs = "serving on :8080\n"
	lastLogs := func() string {
		t.Helper()
		reqs := f.reqs()
		for i := len(reqs) - 1; i >= 0; i-- {
			if strings.Contains(reqs[i], "/logs/") {
				return reqs[i]
			}
		}
		t.Fatalf("no log request in %q", reqs)
		return ""
	}
	logsPath := "GET /v1/client/fs/logs/" + allocA

	if out := wantOut(t, []string{"alloc", "logs", "a1a1", "-address", f.url, "-f"}, 0); out != f.logs {
		t.Fatalf("alloc logs printed %q", out)
	}
	if got, want := lastLogs(), logsPath+"?follow=true"; got != want {
		t.Fatalf("`alloc logs ALLOC -f` asked %q, want %q", got, want)
	}
	wantOut(t, []string{"alloc", "logs", "-address", f.url, "a1a1", "server", "-stderr", "-c", "5", "-tail"}, 0)
	if got, want := lastLogs(), logsPath+"?offset=5&origin=end&task=server&type=stderr"; got != want {
		t.Fatalf("flags after the task asked %q, want %q", got, want)
	}
	// -c=5 is one token; the -f between the ID and the task is a flag.
	wantOut(t, []string{"alloc", "logs", "-address", f.url, "a1a1", "-f", "server", "-c=5"}, 0)
	if got, want := lastLogs(), logsPath+"?follow=true&offset=5&task=server"; got != want {
		t.Fatalf("interleaved flags asked %q, want %q", got, want)
	}

	n := len(f.reqs())
	wantOut(t, []string{"alloc", "logs", "-address", f.url, "a1a1", "--", "-f"}, exitError, `alloc `+allocA+` has no task "-f"`)
	// A name that starts with '-' after an argument may be an argument:
	// the error says to put it after "--".
	wantOut(t, []string{"alloc", "logs", "-address", f.url, "a1a1", "-nope"}, exitUsage,
		`flag provided but not defined: -nope (an argument starting with '-', such as a task or job name, goes after "--": berth alloc logs ARGS -- -nope)`)
	wantOut(t, []string{"alloc", "logs", "-address", f.url, "a1a1", "-c"}, exitUsage, "flag needs an argument: -c")
	for _, r := range f.reqs()[n:] {
		if strings.Contains(r, "/logs/") {
			t.Fatalf("a refused command line asked for logs: %s", r)
		}
	}

	// Every command reads flags after its arguments: here one that writes.
	f.nodes[nodeA] = &pb.Node{Id: nodeA, Name: "client-1", Status: pb.NodeStatus_NODE_STATUS_READY}
	wantOut(t, []string{"node", "eligibility", "n1", "-disable", "-address", f.url}, 0)
	if got := f.reqs()[len(f.reqs())-1]; got != "PUT /v1/node/"+nodeA+"/eligibility" {
		t.Fatalf("node eligibility ID -disable sent %q", got)
	}
}

// TestFlagsFirstOverEveryCommand moves each flag of every command that
// takes arguments from after an argument to before it, over the real
// command tree, so a command added later is covered: a flag that takes a
// value keeps it, a boolean takes none, and the arguments follow a "--".
func TestFlagsFirstOverEveryCommand(t *testing.T) {
	app := newApp(nil, nil)
	var walk func(cmds []*cli.Command, path []string)
	checked := 0
	walk = func(cmds []*cli.Command, path []string) {
		for _, c := range cmds {
			p := append(slices.Clone(path), c.Name)
			if len(c.Subcommands) > 0 {
				walk(c.Subcommands, p)
				continue
			}
			for _, fl := range c.Flags {
				name := fl.Names()[0]
				flag := []string{"-" + name}
				if v, ok := fl.(interface{ TakesValue() bool }); ok && v.TakesValue() {
					flag = append(flag, "VALUE")
				}
				in := append(append(append([]string{"berth"}, p...), "ARG"), flag...)
				want := append(append(append(append([]string{"berth"}, p...), flag...), "--"), "ARG")
				if got := flagsFirst(app, in); !slices.Equal(got, want) {
					t.Errorf("flagsFirst(%q) = %q, want %q", in, got, want)
				}
				checked++
			}
		}
	}
	walk(app.Commands, nil)
	if checked < 50 {
		t.Fatalf("checked %d flags; the walk of the command tree is broken", checked)
	}

	for _, tc := range []struct{ in, want []string }{
		// Global flags stay before the command.
		{[]string{"berth", "-address", "X", "alloc", "logs", "A", "-f"}, []string{"berth", "-address", "X", "alloc", "logs", "-f", "--", "A"}},
		// A user's "--" ends the flags; what follows stays an argument.
		{[]string{"berth", "alloc", "logs", "A", "--", "-f", "-c"}, []string{"berth", "alloc", "logs", "--", "A", "-f", "-c"}},
		// "-" is an argument (stdin); a value that looks like a flag is a value.
		{[]string{"berth", "job", "plan", "-", "-address", "-x"}, []string{"berth", "job", "plan", "-address", "-x", "--", "-"}},
		// Help is help, wherever -h is.
		{[]string{"berth", "alloc", "logs", "A", "-h"}, []string{"berth", "alloc", "logs", "-h"}},
		// Nothing to move.
		{[]string{"berth", "node", "status"}, []string{"berth", "node", "status"}},
		{[]string{"berth", "node", "status", "-json"}, []string{"berth", "node", "status", "-json"}},
		// An unknown command is left to the parser to refuse.
		{[]string{"berth", "nodes", "status", "x", "-json"}, []string{"berth", "nodes", "status", "x", "-json"}},
		// Shell completion reads the line as typed.
		{[]string{"berth", "alloc", "logs", "A", "--generate-bash-completion"}, []string{"berth", "alloc", "logs", "A", "--generate-bash-completion"}},
	} {
		if got := flagsFirst(app, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("flagsFirst(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
