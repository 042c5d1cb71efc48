package fsm

import (
	"fmt"
	"sync"

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
	raw []byte

	once sync.Once
	msg  proto.Message
	err  error
}

// rawRow is a row holding raw, an encoding checkWire accepted, under key.
func rawRow(key string, raw []byte) *row {
	return &row{key: key, raw: raw}
}

// messageRow is a row holding msg, encoded deterministically, under key. msg
// becomes the row's decoded message, so it must not be mutated afterwards.
func messageRow(key string, msg proto.Message) (*row, error) {
	raw, err := encodeOptions.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %q: %w", msg.ProtoReflect().Descriptor().Name(), key, err)
	}
	r := &row{key: key, raw: raw}
	r.once.Do(func() { r.msg = msg })
	return r, nil
}

// message returns the row decoded as a new message of type mt, decoding it
// on the first call. Callers share the message and must not mutate it.
func (r *row) message(mt protoreflect.MessageType) (proto.Message, error) {
	r.once.Do(func() {
		m := mt.New().Interface()
		if err := proto.Unmarshal(r.raw, m); err != nil {
			r.err = fmt.Errorf("decoding %s %q: %w", mt.Descriptor().Name(), r.key, err)
			return
		}
		r.msg = m
	})
	return r.msg, r.err
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
