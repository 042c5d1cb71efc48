package fsm

import (
	"fmt"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// row is how a data table keeps one object: its protobuf encoding and its
// primary key. The message itself is decoded the first time someone reads
// the row and kept for later readers, so each version of a row is decoded
// at most once, and only if it is read.
//
// Keeping encodings rather than messages is what makes applying a command
// cheap: the hot commands (NodeRegister) check the bytes they carry, read
// the fields they need, and store the bytes, with no message built on the
// write path, so every server applies them at the cost of a scan and a
// tree insert. It also keeps the state compact: a stored node is its ~400
// bytes of encoding, not the few kilobytes of maps and strings its decoded
// message holds, and the garbage collector has almost nothing to trace in
// it. Snapshots write the bytes as they are.
//
// A row is immutable once stored: a change stores a new row. Every raw
// encoding was accepted by checkWire or produced by proto.Marshal, so it
// always decodes.
type row struct {
	key string
	// indexKey is key as the primary index stores it (see terminated),
	// built once with the row rather than on every index lookup.
	indexKey []byte
	raw      []byte
	// decoded is set the first time the row is read. Two first readers
	// racing may both decode; one result wins and both get it.
	decoded atomic.Pointer[decodedRow]
}

// decodedRow is a row's message, or why it did not decode.
type decodedRow struct {
	msg proto.Message
	err error
}

// rawRow is a row holding raw, an encoding checkWire accepted, under key.
func rawRow(key string, raw []byte) *row {
	return &row{key: key, indexKey: terminated(key), raw: raw}
}

// messageRow is a row holding msg, encoded deterministically, under key. msg
// becomes the row's decoded message, so it must not be mutated afterwards.
func messageRow(key string, msg proto.Message) (*row, error) {
	raw, err := encodeOptions.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %q: %w", msg.ProtoReflect().Descriptor().Name(), key, err)
	}
	r := rawRow(key, raw)
	r.decoded.Store(&decodedRow{msg: msg})
	return r, nil
}

// message returns the row decoded as a message of type mt, decoding it on
// the first call. Callers share the message and must not mutate it.
func (r *row) message(mt protoreflect.MessageType) (proto.Message, error) {
	if d := r.decoded.Load(); d != nil {
		return d.msg, d.err
	}
	d := &decodedRow{msg: mt.New().Interface()}
	if err := proto.Unmarshal(r.raw, d.msg); err != nil {
		d.msg, d.err = nil, fmt.Errorf("decoding %s %q: %w", mt.Descriptor().Name(), r.key, err)
	}
	if !r.decoded.CompareAndSwap(nil, d) {
		d = r.decoded.Load()
	}
	return d.msg, d.err
}

// rowMessage returns r decoded as an M, the message type of its table.
func rowMessage[M proto.Message](r *row) (M, error) {
	var zero M
	m, err := r.message(zero.ProtoReflect().Type())
	if err != nil {
		return zero, err
	}
	out, ok := m.(M)
	if !ok {
		return zero, fmt.Errorf("row %q holds a %T, want %T", r.key, m, zero)
	}
	return out, nil
}
