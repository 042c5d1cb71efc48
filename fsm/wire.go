package fsm

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file reads protobuf encodings without decoding them into messages.
// The state store keeps every row as its encoding (see row), so the hot
// commands never build the message at all: they check the bytes, read the
// two or three fields they need, and store the bytes.
//
// checkWire accepts exactly the encodings proto.Unmarshal accepts (the fuzz
// test FuzzCheckWire holds it to that), so a row the FSM stored always
// decodes, on every server.

// errWire is what a malformed encoding fails with, wrapped with where.
var errWire = errors.New("invalid protobuf encoding")

// wireSchema is a message type compiled for checkWire: for each field
// number, how its value is encoded and what checking it takes. Looking a
// field up in it is an index into a slice, where the descriptor would cost a
// map lookup and several interface calls per field.
type wireSchema struct {
	name protoreflect.Name
	// fields is indexed by field number; sparse holds numbers past its end.
	fields []wireField
	sparse map[protowire.Number]*wireField
}

// wireField is one known field of a wireSchema.
type wireField struct {
	name  protoreflect.Name
	known bool
	// typ is the wire type the field's values are encoded with.
	typ protowire.Type
	// packed: a repeated scalar, which also comes packed in one bytes value.
	packed bool
	// utf8: a string that proto.Unmarshal refuses unless valid UTF-8.
	utf8 bool
	// isMap: a map field, whose message is the map's entry type.
	isMap bool
	// message is the schema of a message field's (or map field's entry's)
	// values.
	message *wireSchema
}

// denseFields is how many field numbers a wireSchema indexes directly.
const denseFields = 64

// compileWire compiles md, and every message type reachable from its
// fields, for checkWire. It panics for a message type whose decoding
// depends on more than whether its encoding is well formed (extension
// ranges, required fields, groups), which the tests catch at once: checkWire
// could not promise to agree with proto.Unmarshal about it.
func compileWire(md protoreflect.MessageDescriptor) *wireSchema {
	return compileWireMemo(md, map[protoreflect.FullName]*wireSchema{})
}

func compileWireMemo(md protoreflect.MessageDescriptor, memo map[protoreflect.FullName]*wireSchema) *wireSchema {
	if s, ok := memo[md.FullName()]; ok {
		return s // a type that contains itself, or one seen before
	}
	if md.ExtensionRanges().Len() > 0 {
		// proto.Unmarshal checks a value in an extension range against
		// whatever extension the binary happens to link in.
		panic(fmt.Sprintf("fsm: checkWire cannot check %s: it has extension ranges", md.FullName()))
	}
	s := &wireSchema{name: md.Name()}
	memo[md.FullName()] = s
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if why := unsupportedWire(fd); why != "" {
			panic(fmt.Sprintf("fsm: checkWire cannot check %s: %s", fd.FullName(), why))
		}
		f := wireField{
			name:  fd.Name(),
			known: true,
			typ:   wireTypeOf(fd.Kind()),
			utf8:  fd.Kind() == protoreflect.StringKind && checksUTF8(fd),
		}
		f.packed = fd.IsList() && isPackable(f.typ)
		f.isMap = fd.IsMap()
		if fd.Kind() == protoreflect.MessageKind {
			f.message = compileWireMemo(fd.Message(), memo)
		}
		if num := fd.Number(); num < denseFields {
			if int(num) >= len(s.fields) {
				s.fields = append(s.fields, make([]wireField, int(num)+1-len(s.fields))...)
			}
			s.fields[num] = f
		} else {
			if s.sparse == nil {
				s.sparse = map[protowire.Number]*wireField{}
			}
			s.sparse[num] = &f
		}
	}
	return s
}

// unsupportedWire says why checkWire cannot check field fd as
// proto.Unmarshal would, or "" when it can: proto.Unmarshal fails a message
// that lacks a required field, and checks a group's fields, where checkWire
// would only check that the group is well formed.
func unsupportedWire(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.Cardinality() == protoreflect.Required:
		return "required field"
	case fd.Kind() == protoreflect.GroupKind:
		return "group (delimited) encoding"
	}
	return ""
}

// field returns the known field num, or nil.
func (s *wireSchema) field(num protowire.Number) *wireField {
	if int(num) < len(s.fields) {
		if f := &s.fields[num]; f.known {
			return f
		}
		return nil
	}
	return s.sparse[num]
}

// checkWire reports whether b is an encoding of a message of schema s that
// proto.Unmarshal would accept, without allocating: every tag and value is
// well formed, every known message field holds a valid message of its type
// (map entries included), every proto3 string is valid UTF-8, and messages
// nest no deeper than proto.Unmarshal's recursion limit. As in
// proto.Unmarshal, a known field with another wire type than its own counts
// as an unknown field, and unknown fields only need to be well formed.
func checkWire(s *wireSchema, b []byte) error {
	return checkWireDepth(s, b, protowire.DefaultRecursionLimit)
}

// checkWireDepth is checkWire for a message with depth levels of nesting
// left. It counts levels as proto.Unmarshal does: one per message, and one
// more per map entry.
func checkWireDepth(s *wireSchema, b []byte, depth int) error {
	if depth--; depth < 0 {
		return fmt.Errorf("%s: %w: messages nested more than %d deep", s.name, errWire, protowire.DefaultRecursionLimit)
	}
	for len(b) > 0 {
		var num protowire.Number
		var typ protowire.Type
		var n int
		if b[0] < 0x80 && b[0] >= 1<<3 {
			// A one-byte tag, as every field numbered below 16 has.
			num, typ, n = protowire.Number(b[0]>>3), protowire.Type(b[0]&7), 1
		} else if num, typ, n = protowire.ConsumeTag(b); n < 0 {
			return fmt.Errorf("%s: %w: tag: %w", s.name, errWire, protowire.ParseError(n))
		}
		b = b[n:]
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("%s: %w: field number %d is over the maximum %d", s.name, errWire, num, protowire.MaxValidNumber)
		}
		if typ == protowire.EndGroupType {
			return fmt.Errorf("%s: %w: end of group %d that never started", s.name, errWire, num)
		}
		if f := s.field(num); f != nil {
			n, err := f.check(typ, b, depth)
			if err != nil {
				return wireErrorAt(s, f, depth, err)
			}
			if n > 0 {
				b = b[n:]
				continue
			}
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return fmt.Errorf("%s: %w: field %d: %w", s.name, errWire, num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

// wirePathLevels is how many levels of fields, from the outermost, an error
// of checkWire names.
const wirePathLevels = 16

// wireErrorAt wraps err, found in field f of a message of schema s with
// depth levels left, with where it is. Only the outermost wirePathLevels
// levels are named: naming every level of a deep encoding would cost time
// and memory quadratic in its depth.
func wireErrorAt(s *wireSchema, f *wireField, depth int, err error) error {
	switch level := protowire.DefaultRecursionLimit - 1 - depth; {
	case level < wirePathLevels:
		return fmt.Errorf("%s.%s: %w", s.name, f.name, err)
	case level == wirePathLevels:
		return fmt.Errorf("...: %w", err)
	}
	return err
}

// check checks a value of f, encoded with wire type typ, at the start of b,
// and returns its length. It returns 0 and no error when typ is not f's
// wire type: the value is then an unknown field. depth is what is left to
// the message holding f.
func (f *wireField) check(typ protowire.Type, b []byte, depth int) (int, error) {
	if f.isMap && depth == 0 {
		// proto.Unmarshal counts a map entry's level before it looks at
		// the wire type, so at the limit even a map field's unknown-typed
		// value is too deep.
		return 0, fmt.Errorf("%w: messages nested more than %d deep", errWire, protowire.DefaultRecursionLimit)
	}
	if typ != f.typ {
		if typ == protowire.BytesType && f.packed {
			return checkPacked(f.typ, b)
		}
		return 0, nil
	}
	switch typ {
	case protowire.VarintType:
		if len(b) > 0 && b[0] < 0x80 {
			return 1, nil
		}
		_, n := protowire.ConsumeVarint(b)
		return wireLen(n)
	case protowire.Fixed32Type:
		_, n := protowire.ConsumeFixed32(b)
		return wireLen(n)
	case protowire.Fixed64Type:
		_, n := protowire.ConsumeFixed64(b)
		return wireLen(n)
	case protowire.BytesType:
		var v []byte
		var n int
		if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
			// A one-byte length, as every value under 128 bytes has.
			v, n = b[1:1+b[0]], 1+int(b[0])
		} else if v, n = protowire.ConsumeBytes(b); n < 0 {
			return wireLen(n)
		}
		if f.message != nil {
			if err := checkWireDepth(f.message, v, depth); err != nil {
				return 0, err
			}
		} else if f.utf8 && !utf8.Valid(v) {
			return 0, fmt.Errorf("%w: string is not valid UTF-8", errWire)
		}
		return n, nil
	}
	// Not reached: compileWire refuses group fields, so no field has the
	// group wire type.
	return 0, nil
}

// checkPacked checks a packed repeated field of scalars of wire type elem.
func checkPacked(elem protowire.Type, b []byte) (int, error) {
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return wireLen(n)
	}
	for len(v) > 0 {
		var m int
		switch elem {
		case protowire.VarintType:
			_, m = protowire.ConsumeVarint(v)
		case protowire.Fixed32Type:
			_, m = protowire.ConsumeFixed32(v)
		default:
			_, m = protowire.ConsumeFixed64(v)
		}
		if m < 0 {
			return 0, fmt.Errorf("%w: packed value: %w", errWire, protowire.ParseError(m))
		}
		v = v[m:]
	}
	return n, nil
}

// wireLen turns a protowire length-or-error into a length or an error.
func wireLen(n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("%w: %w", errWire, protowire.ParseError(n))
	}
	return n, nil
}

// wireTypeOf is the wire type a field of kind k is encoded with.
func wireTypeOf(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.BoolKind, protoreflect.EnumKind,
		protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Uint32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind:
		return protowire.VarintType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	default: // strings, bytes, messages
		return protowire.BytesType
	}
}

func isPackable(t protowire.Type) bool {
	return t == protowire.VarintType || t == protowire.Fixed32Type || t == protowire.Fixed64Type
}

// checksUTF8 reports whether proto.Unmarshal refuses invalid UTF-8 in string
// field fd: in proto3 files, and in editions unless the field opts out;
// never in proto2. It decides as the protobuf runtime does (its
// internal/strs.EnforceUTF8).
func checksUTF8(fd protoreflect.FieldDescriptor) bool {
	if fd.Syntax() == protoreflect.Editions {
		if e, ok := fd.(interface{ EnforceUTF8() bool }); ok {
			return e.EnforceUTF8()
		}
	}
	return fd.Syntax() == protoreflect.Proto3
}

// The readers below take an encoding checkWire accepted. Each returns the
// value proto.Unmarshal would set: the last occurrence of a singular scalar
// field wins, and an occurrence with another wire type is an unknown field,
// not the field.

// wireString returns the string field num of the message encoded in b, ""
// when absent.
func wireString(b []byte, num protowire.Number) string {
	var last []byte
	eachField(b, func(n protowire.Number, typ protowire.Type, v []byte) {
		if n == num && typ == protowire.BytesType {
			last, _ = protowire.ConsumeBytes(v)
		}
	})
	return string(last)
}

// wireVarint returns the varint field num of the message encoded in b, 0
// when absent.
func wireVarint(b []byte, num protowire.Number) uint64 {
	var last uint64
	eachField(b, func(n protowire.Number, typ protowire.Type, v []byte) {
		if n == num && typ == protowire.VarintType {
			last, _ = protowire.ConsumeVarint(v)
		}
	})
	return last
}

// wireMessage returns the encoding of message field num of the message
// encoded in b, and whether the field is present. Occurrences of a message
// field merge, and merging encodings is concatenating them, so a field that
// occurs more than once comes back as their concatenation (a new slice);
// one occurrence comes back as a sub-slice of b. A present field is never
// nil, even when empty, so callers may test presence with nil.
func wireMessage(b []byte, num protowire.Number) ([]byte, bool) {
	var out []byte
	found, copied := false, false
	eachField(b, func(n protowire.Number, typ protowire.Type, v []byte) {
		if n != num || typ != protowire.BytesType {
			return
		}
		m, _ := protowire.ConsumeBytes(v)
		switch {
		case !found:
			out, found = m, true
		case !copied:
			// make, not append to nil: two empty occurrences must still
			// come back non-nil.
			out, copied = append(append(make([]byte, 0, len(out)+len(m)), out...), m...), true
		default:
			out = append(out, m...)
		}
	})
	return out, found
}

// eachField calls fn with every top-level field of the message encoded in
// b, value bytes starting at the value. b must be well formed.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, value []byte)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return
		}
		fn(num, typ, b[:m])
		b = b[m:]
	}
}

// appendVarintField appends field num with value v to an encoding. Appended
// to a message's encoding it overrides any earlier value of a singular
// scalar field, which is how the FSM sets the fields it assigns (create and
// modify index) without decoding the message.
func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// fieldNumber returns the number of md's field called name; it panics for a
// name md does not have, which the tests catch at once.
func fieldNumber(md protoreflect.MessageDescriptor, name protoreflect.Name) protowire.Number {
	fd := md.Fields().ByName(name)
	if fd == nil {
		panic(fmt.Sprintf("fsm: %s has no field %s", md.FullName(), name))
	}
	return fd.Number()
}
