package cli

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
)

// topCommands is the tree's first level: each entry builds the command it
// names, which has no alias (commandsFor matches names only).
func TestTopCommandsAreTheTree(t *testing.T) {
	var names []string
	for _, c := range topCommands {
		cmd := c.build()
		if cmd.Name != c.name || len(cmd.Aliases) > 0 {
			t.Errorf("topCommands entry %q builds command %q with aliases %q", c.name, cmd.Name, cmd.Aliases)
		}
		names = append(names, c.name)
	}
	var tree []string
	for _, cmd := range newApp(io.Discard, io.Discard).Commands {
		tree = append(tree, cmd.Name)
	}
	if !slices.Equal(names, tree) {
		t.Fatalf("tree %q, topCommands %q", tree, names)
	}
}

func TestOnlyTheNamedCommandIsBuilt(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // nil: every command
	}{
		{[]string{"berth", "version"}, []string{"version"}},
		{[]string{"berth", "node", "status", "-address", "http://x"}, []string{"node"}},
		{[]string{"berth", "-address", "http://x", "-token=t", "node", "status"}, []string{"node"}},
		{[]string{"berth", "-address", "node", "job"}, []string{"job"}}, // "node" is -address's value
		{[]string{"berth"}, nil},
		{[]string{"berth", "-h"}, nil},
		{[]string{"berth", "help", "node"}, nil},
		{[]string{"berth", "nod"}, nil},
		{[]string{"berth", "--", "node"}, nil},
	} {
		var got []string
		for _, c := range newAppFor(io.Discard, io.Discard, tc.args).Commands {
			got = append(got, c.Name)
		}
		want := tc.want
		if want == nil {
			for _, c := range topCommands {
				want = append(want, c.name)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q built %q, want %q", tc.args, got, want)
		}
	}
}

// A command line answers the same from the command's subtree as from the
// whole tree: help, usage errors, unknown subcommands, completions.
func TestSubtreeAnswersAsTheWholeTree(t *testing.T) {
	for _, args := range [][]string{
		{"berth", "version"},
		{"berth", "node", "-h"},
		{"berth", "node", "status", "-h"},
		{"berth", "job", "bogus"},
		{"berth", "node", "status", "-bogus"},
		{"berth", "volume", "create"},
		{"berth", "node", "--generate-bash-completion"},
		{"berth", "-address", "http://127.0.0.1:1", "acl", "token", "-h"},
	} {
		run := func(whole bool) (int, string) {
			var out, errOut bytes.Buffer
			app := newAppFor(&out, &errOut, args)
			if whole {
				app = newApp(&out, &errOut)
			}
			code := runApp(app, args, strings.NewReader(""), &errOut)
			return code, out.String() + "\n--stderr--\n" + errOut.String()
		}
		wantCode, want := run(true)
		gotCode, got := run(false)
		if gotCode != wantCode || got != want {
			t.Errorf("%q: exit %d, output\n%s\nwant exit %d, output\n%s", args, gotCode, got, wantCode, want)
		}
	}
}

// `berth version` builds one command, not the tree (~0.15 ms of its start).
func TestVersionBuildsLittle(t *testing.T) {
	args := []string{"berth", "version"}
	one := testing.AllocsPerRun(20, func() { newAppFor(io.Discard, io.Discard, args) })
	all := testing.AllocsPerRun(20, func() { newApp(io.Discard, io.Discard) })
	if one*10 > all {
		t.Fatalf("berth version's tree takes %.0f allocations, the whole tree %.0f", one, all)
	}
}

// The app's Compiled is set, so urfave/cli does not stat the binary on
// every run to fill it in (no help template of berth's shows it).
func TestAppDoesNotStatTheBinary(t *testing.T) {
	for _, args := range [][]string{{"berth", "version"}, {"berth"}} {
		if newAppFor(io.Discard, io.Discard, args).Compiled.IsZero() {
			t.Errorf("%q: Compiled is zero: urfave/cli stats os.Args[0] at each run", args)
		}
	}
}
