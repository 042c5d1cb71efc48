package cli

import (
	"bufio"
	"io"
	"text/tabwriter"
)

// table is a tabwriter whose Flush hands the whole table to its writer in
// one write. A tabwriter writes each cell and each run of padding with a
// Write of its own: on a terminal or a pipe, a system call per cell (a
// 3-node table took 40; issue 26, `berth node status`). The tabwriter
// holds every line until Flush anyway, so this delays nothing.
type table struct {
	*tabwriter.Writer
	out *bufio.Writer
}

// newTable is tabwriter.NewWriter with one write per Flush.
func newTable(w io.Writer, minwidth, tabwidth, padding int, padchar byte, flags uint) *table {
	out := bufio.NewWriterSize(w, 4096)
	return &table{Writer: tabwriter.NewWriter(out, minwidth, tabwidth, padding, padchar, flags), out: out}
}

// Flush writes the table's lines so far to the underlying writer.
func (t *table) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	return t.out.Flush()
}
