package fsm

import (
	"slices"
	"testing"
)

// TestSnapshotCoversEveryTable guards the rule that a table added to the
// registry is also in the current snapshot version, and that the version's
// table list names only real tables: otherwise a snapshot would silently
// drop rows, or every restore would fail.
func TestSnapshotCoversEveryTable(t *testing.T) {
	current := snapshotTables[SnapshotVersion]
	for _, spec := range tables {
		if !slices.Contains(current, spec.name) {
			t.Errorf("table %s is not in snapshot version %d: add it (with a new version)", spec.name, SnapshotVersion)
		}
	}
	for _, name := range current {
		if _, ok := tableNamed(name); !ok {
			t.Errorf("snapshot version %d names table %s, which is not registered", SnapshotVersion, name)
		}
	}
	for v := uint32(1); v <= SnapshotVersion; v++ {
		if _, ok := snapshotTables[v]; !ok {
			t.Errorf("snapshot version %d has no table list: Restore could not read it", v)
		}
	}
}

// TestCommandTableNames checks every command has a distinct metric name, a
// message type, and a number other than 0.
func TestCommandTableNames(t *testing.T) {
	seen := map[string]MessageType{}
	for typ, c := range commands {
		if typ == 0 {
			t.Errorf("command %s uses type 0, which PeekType reports for empty entries", c.name)
		}
		if other, dup := seen[c.name]; dup {
			t.Errorf("types %d and %d share the name %s", other, typ, c.name)
		}
		seen[c.name] = typ
		if c.message == nil {
			t.Errorf("%s has no message type", c.name)
		}
	}
}
