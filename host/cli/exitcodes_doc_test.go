package cli

import (
	"os"
	"strings"
	"testing"
)

// TestExitCodeNumbersAreTheDocumentedOnes pins the numbers of the exit-code
// scheme to README's "Exit codes" table. The tests of each command compare
// with the constants, so a constant changed would pass them while
// breaking every script written against the README.
func TestExitCodeNumbersAreTheDocumentedOnes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"exitOK", exitOK, 0}, {"exitError", exitError, 1}, {"exitUsage", exitUsage, 2}, {"exitPlacementFailed", exitPlacementFailed, 3},
		{"planNoChange", planNoChange, 0}, {"planChanges", planChanges, 1}, {"planError", planError, 255},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, README says %d", c.name, c.got, c.want)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n### Exit codes\n")
	if !ok {
		t.Fatal(`README has no "### Exit codes" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, want := range []string{
		"| 0 | the command did what it was asked |",
		"| 1 | an error:",
		"| 2 | a usage error:",
		"| 3 | `job run`, `job revert`, `job stop`, `alloc stop`",
		"0 when no\nallocation would be created or destroyed, 1 when some would, 255 when the plan could not be made",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("README's Exit codes section lacks %q:\n%s", want, section)
		}
	}
}
