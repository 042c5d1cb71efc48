package cli

import (
	"bytes"
	"fmt"
	"testing"
	"text/tabwriter"

	"berth.dev/berth/rpc/api"
)

// countingWriter counts the writes it is handed.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// A table comes out in one write, the same bytes a tabwriter writes.
func TestTableIsOneWrite(t *testing.T) {
	var plain bytes.Buffer
	ref := tabwriter.NewWriter(&plain, 0, 4, 2, ' ', 0)
	var got countingWriter
	tw := newTable(&got, 0, 4, 2, ' ', 0)
	for _, w := range []interface{ Write([]byte) (int, error) }{ref, tw} {
		fmt.Fprintln(w, "ID\tName\tStatus")
		for i := range 5 {
			fmt.Fprintf(w, "%08d\tnode-%d\tready\n", i, i)
		}
	}
	if err := ref.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	if got.writes != 1 || got.String() != plain.String() {
		t.Fatalf("%d writes of %q, want 1 of %q", got.writes, got.String(), plain.String())
	}
}

func TestNodeTableIsOneWrite(t *testing.T) {
	var got countingWriter
	rows := []api.NodeRow{{ID: "5d0f0000-0000-4000-8000-000000000001", Name: "a", Status: "ready"}, {ID: "5d0f0000-0000-4000-8000-000000000002", Name: "b", Status: "down"}}
	if err := printNodeTable(&got, rows, false); err != nil {
		t.Fatal(err)
	}
	if got.writes != 1 || !bytes.Contains(got.Bytes(), []byte("5d0f0000  b")) {
		t.Fatalf("%d writes: %q", got.writes, got.String())
	}
}
