package server

import (
	"io"

	"github.com/hashicorp/raft"
)

// WriteSnapshotArchive writes an FSM snapshot stream (state, meta.Size
// bytes) as the archive `berth operator snapshot save` writes and
// `operator snapshot restore` reads, for tools that build a state outside
// a cluster (the bench's large state) and restore it into one.
func WriteSnapshotArchive(w io.Writer, meta *raft.SnapshotMeta, state io.Reader) error {
	return writeArchive(w, meta, state)
}
