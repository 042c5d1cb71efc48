package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/errcode"
)

// A snapshot archive is what `berth operator snapshot save` writes:
//
//	"BERTHSNP" | uint32 version | uint32 len(meta) | meta (JSON raft.SnapshotMeta) |
//	state (meta.Size bytes, the FSM snapshot stream) | sha256 of all preceding bytes
//
// The checksum is verified in full before anything is restored, so a
// truncated or corrupted file is refused without touching the cluster.
const (
	archiveMagic   = "BERTHSNP"
	archiveVersion = 1
	// maxArchiveMeta bounds the metadata so a corrupt length cannot allocate.
	maxArchiveMeta = 1 << 20
)

// ErrBadArchive is returned by readArchive when a snapshot file is truncated,
// corrupted or not a berth snapshot. A sound archive whose state the FSM
// refuses is refused with the FSM's error instead (fsm.ErrSnapshotCorrupt,
// DataLoss; fsm.ErrSnapshotVersion, FailedPrecondition: upgrade this
// server), so its code says which it is.
var ErrBadArchive = errcode.New(codes.InvalidArgument, "invalid snapshot archive")

// writeArchive writes meta and the FSM state read from state to w.
func writeArchive(w io.Writer, meta *raft.SnapshotMeta, state io.Reader) error {
	h := sha256.New()
	mw := io.MultiWriter(w, h)
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	var hdr bytes.Buffer
	hdr.WriteString(archiveMagic)
	_ = binary.Write(&hdr, binary.BigEndian, uint32(archiveVersion))
	_ = binary.Write(&hdr, binary.BigEndian, uint32(len(metaJSON)))
	hdr.Write(metaJSON)
	if _, err := mw.Write(hdr.Bytes()); err != nil {
		return err
	}
	n, err := io.Copy(mw, state)
	if err != nil {
		return fmt.Errorf("copying snapshot state: %w", err)
	}
	if n != meta.Size {
		return fmt.Errorf("snapshot state is %d bytes, metadata says %d", n, meta.Size)
	}
	_, err = w.Write(h.Sum(nil))
	return err
}

// readArchive verifies the archive in f (checksum, header, and that the FSM
// can restore the state) and returns its metadata and a reader positioned at
// the FSM state.
func readArchive(f *os.File) (*raft.SnapshotMeta, io.Reader, error) {
	meta, state, _, err := readArchiveFor(fsm.New(nil), f)
	return meta, state, err
}

// readArchiveFor is readArchive checking the state with into's tables, and
// returning the store it read too: offered to into (fsm.OfferRestore), raft's
// Restore of the state swaps it in without decoding the state again.
func readArchiveFor(into *fsm.FSM, f *os.File) (*raft.SnapshotMeta, io.Reader, *fsm.CheckedSnapshot, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, nil, nil, err
	}
	total := st.Size()
	if total < int64(len(archiveMagic)+8+sha256.Size) {
		return nil, nil, nil, fmt.Errorf("%w: %d bytes is too short", ErrBadArchive, total)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, total-sha256.Size)); err != nil {
		return nil, nil, nil, err
	}
	sum := make([]byte, sha256.Size)
	if _, err := f.ReadAt(sum, total-sha256.Size); err != nil {
		return nil, nil, nil, err
	}
	if !bytes.Equal(sum, h.Sum(nil)) {
		return nil, nil, nil, fmt.Errorf("%w: checksum mismatch (truncated or corrupted file)", ErrBadArchive)
	}
	r := io.NewSectionReader(f, 0, total-sha256.Size)
	hdr := make([]byte, len(archiveMagic)+8)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, nil, nil, err
	}
	if string(hdr[:len(archiveMagic)]) != archiveMagic {
		return nil, nil, nil, fmt.Errorf("%w: not a berth snapshot", ErrBadArchive)
	}
	if v := binary.BigEndian.Uint32(hdr[8:12]); v != archiveVersion {
		return nil, nil, nil, fmt.Errorf("%w: version %d, this berth reads version %d", ErrBadArchive, v, archiveVersion)
	}
	metaLen := binary.BigEndian.Uint32(hdr[12:16])
	if metaLen > maxArchiveMeta {
		return nil, nil, nil, fmt.Errorf("%w: metadata length %d too large", ErrBadArchive, metaLen)
	}
	metaJSON := make([]byte, metaLen)
	if _, err := io.ReadFull(r, metaJSON); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: reading metadata: %v", ErrBadArchive, err)
	}
	var meta raft.SnapshotMeta
	if err := json.Unmarshal(metaJSON, &meta); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: metadata: %v", ErrBadArchive, err)
	}
	offset := int64(len(hdr)) + int64(metaLen)
	if rest := total - sha256.Size - offset; rest != meta.Size {
		return nil, nil, nil, fmt.Errorf("%w: state is %d bytes, metadata says %d", ErrBadArchive, rest, meta.Size)
	}
	// A checksum proves the file is what was written, not that this server
	// can read the state in it, and raft's Restore panics — taking the
	// server down — when the FSM refuses the state. So the state is first
	// read into a store nothing uses yet (fsm.CheckSnapshot); what it refuses (fsm.ErrSnapshotCorrupt,
	// fsm.ErrSnapshotVersion) is refused here, with the cluster untouched.
	// A state from a newer berth is "upgrade this server" (the FSM's
	// FailedPrecondition); anything else the FSM refuses is a bad file
	// (InvalidArgument), not the DataLoss a corrupt raft snapshot of our own
	// would be: the operator sent it, and the cluster lost nothing.
	checked, err := into.CheckSnapshot(io.NewSectionReader(f, offset, meta.Size), meta.Size)
	if err != nil {
		if errors.Is(err, fsm.ErrSnapshotVersion) {
			return nil, nil, nil, fmt.Errorf("snapshot archive (index %d) holds a state this server cannot restore: %w", meta.Index, err)
		}
		return nil, nil, nil, fmt.Errorf("%w: its state (index %d) cannot be restored: %v", ErrBadArchive, meta.Index, err)
	}
	return &meta, io.NewSectionReader(f, offset, meta.Size), checked, nil
}
