package apijson

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// indentUnit is the indentation of one nesting level.
const indentUnit = "  "

// Marshal renders m as indented JSON (see the package documentation for the
// rules). A nil message is an error: its only rendering, null, is a
// document Unmarshal refuses.
func Marshal(m proto.Message) ([]byte, error) {
	e := &encoder{}
	if err := e.root(m); err != nil {
		return nil, err
	}
	return e.buf, nil
}

// MarshalCompact renders m as Marshal does, without the indentation and
// without the fields at their defaults (an unset optional field, a zero
// scalar, an empty list or map), which Unmarshal reads back the same: the
// form a request body is sent in, so that a job within server.job_max_size
// fits the agent's body limit (MaxExpansion).
func MarshalCompact(m proto.Message) ([]byte, error) {
	e := &encoder{compact: true}
	if err := e.root(m); err != nil {
		return nil, err
	}
	return e.buf, nil
}

// MarshalList renders ms as a JSON array of objects, "[]" when empty. A nil
// element is an error naming its index, as UnmarshalList refuses a null
// element.
func MarshalList[M proto.Message](ms []M) ([]byte, error) {
	e := &encoder{}
	if len(ms) == 0 {
		return []byte("[]"), nil
	}
	e.buf = append(e.buf, '[')
	for i, m := range ms {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.newline(1)
		if err := e.rootAt(m, 1, &path{index: i, kind: pathIndex}); err != nil {
			return nil, err
		}
	}
	e.newline(0)
	e.buf = append(e.buf, ']')
	return e.buf, nil
}

type encoder struct {
	buf []byte
	// compact leaves out the indentation and the fields at their defaults.
	compact bool
}

func (e *encoder) root(m proto.Message) error { return e.rootAt(m, 0, nil) }

func (e *encoder) rootAt(m proto.Message, depth int, p *path) error {
	// A typed nil pointer (a *pb.Node that is nil) is not valid either.
	if m == nil || !m.ProtoReflect().IsValid() {
		return &Error{Path: p.String(), Msg: "nil message: it has no JSON object, and null would not read back"}
	}
	return e.message(m.ProtoReflect(), depth, p)
}

func (e *encoder) newline(depth int) {
	if e.compact {
		return
	}
	e.buf = append(e.buf, '\n')
	for range depth {
		e.buf = append(e.buf, indentUnit...)
	}
}

func (e *encoder) message(m protoreflect.Message, depth int, p *path) error {
	if cv, ok := configValue(m); ok {
		return e.configValue(cv, depth, p)
	}
	fields := m.Descriptor().Fields()
	if fields.Len() == 0 {
		e.buf = append(e.buf, "{}"...)
		return nil
	}
	e.buf = append(e.buf, '{')
	written := 0
	for i := range fields.Len() {
		fd := fields.Get(i)
		if e.compact && !m.Has(fd) {
			continue // Has is false for a default: zero, empty or unset
		}
		if written > 0 {
			e.buf = append(e.buf, ',')
		}
		written++
		e.newline(depth + 1)
		e.string(string(fd.Name()))
		e.colon()
		if err := e.field(m, fd, depth+1, &path{parent: p, name: string(fd.Name())}); err != nil {
			return err
		}
	}
	if written > 0 {
		e.newline(depth)
	}
	e.buf = append(e.buf, '}')
	return nil
}

func (e *encoder) field(m protoreflect.Message, fd protoreflect.FieldDescriptor, depth int, p *path) error {
	t := isTime(fd)
	switch {
	case fd.IsList():
		l := m.Get(fd).List()
		if l.Len() == 0 {
			e.buf = append(e.buf, "[]"...)
			return nil
		}
		e.buf = append(e.buf, '[')
		for i := range l.Len() {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.newline(depth + 1)
			if err := e.value(fd, l.Get(i), t, false, depth+1, &path{parent: p, index: i, kind: pathIndex}); err != nil {
				return err
			}
		}
		e.newline(depth)
		e.buf = append(e.buf, ']')
		return nil
	case fd.IsMap():
		return e.mapValue(fd, m.Get(fd).Map(), t, depth, p)
	case fd.HasPresence() && !m.Has(fd):
		e.buf = append(e.buf, "null"...)
		return nil
	}
	return e.value(fd, m.Get(fd), t, !fd.HasPresence(), depth, p)
}

func (e *encoder) mapValue(fd protoreflect.FieldDescriptor, mp protoreflect.Map, t bool, depth int, p *path) error {
	if mp.Len() == 0 {
		e.buf = append(e.buf, "{}"...)
		return nil
	}
	keys := make([]protoreflect.MapKey, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	kd := fd.MapKey()
	slices.SortFunc(keys, func(a, b protoreflect.MapKey) int { return compareKeys(kd.Kind(), a, b) })
	e.buf = append(e.buf, '{')
	for i, k := range keys {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.newline(depth + 1)
		ks := keyString(kd.Kind(), k)
		if err := e.checkUTF8(ks, p); err != nil {
			return err
		}
		e.string(ks)
		e.colon()
		if err := e.value(fd.MapValue(), mp.Get(k), t, false, depth+1, &path{parent: p, name: ks, kind: pathKey}); err != nil {
			return err
		}
	}
	e.newline(depth)
	e.buf = append(e.buf, '}')
	return nil
}

// colon separates an object's key from its value.
func (e *encoder) colon() {
	if e.compact {
		e.buf = append(e.buf, ':')
		return
	}
	e.buf = append(e.buf, ": "...)
}

// value writes one singular value. zeroTimeNull says a 0 time is written as
// null (an implicit-presence field, where 0 means "never set").
func (e *encoder) value(fd protoreflect.FieldDescriptor, v protoreflect.Value, t, zeroTimeNull bool, depth int, p *path) error {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		e.buf = strconv.AppendBool(e.buf, v.Bool())
	case protoreflect.EnumKind:
		e.enum(fd.Enum(), v.Enum())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		e.buf = strconv.AppendInt(e.buf, v.Int(), 10)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		switch {
		case !t:
			e.buf = strconv.AppendInt(e.buf, v.Int(), 10)
		case v.Int() == 0 && zeroTimeNull:
			e.buf = append(e.buf, "null"...)
		default:
			e.buf = append(e.buf, '"')
			e.buf = time.Unix(0, v.Int()).UTC().AppendFormat(e.buf, time.RFC3339Nano)
			e.buf = append(e.buf, '"')
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		e.buf = strconv.AppendUint(e.buf, v.Uint(), 10)
	case protoreflect.FloatKind:
		e.float(v.Float(), 32)
	case protoreflect.DoubleKind:
		e.float(v.Float(), 64)
	case protoreflect.StringKind:
		if err := e.checkUTF8(v.String(), p); err != nil {
			return err
		}
		e.string(v.String())
	case protoreflect.BytesKind:
		e.buf = append(e.buf, '"')
		e.buf = base64.StdEncoding.AppendEncode(e.buf, v.Bytes())
		e.buf = append(e.buf, '"')
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return e.message(v.Message(), depth, p)
	default:
		return &Error{Path: p.String(), Msg: fmt.Sprintf("field kind %s is not supported", fd.Kind())}
	}
	return nil
}

func (e *encoder) checkUTF8(s string, p *path) error {
	if !utf8.ValidString(s) {
		return &Error{Path: p.String(), Msg: "string is not valid UTF-8"}
	}
	return nil
}

func (e *encoder) enum(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber) {
	if w, ok := EnumWord(ed, n); ok {
		e.string(w)
		return
	}
	e.buf = strconv.AppendInt(e.buf, int64(n), 10)
}

func (e *encoder) float(f float64, bits int) {
	switch {
	case math.IsNaN(f):
		e.buf = append(e.buf, `"NaN"`...)
	case math.IsInf(f, 1):
		e.buf = append(e.buf, `"Infinity"`...)
	case math.IsInf(f, -1):
		e.buf = append(e.buf, `"-Infinity"`...)
	default:
		e.buf = strconv.AppendFloat(e.buf, f, 'g', -1, bits)
	}
}

// string writes s as a JSON string. Only what JSON requires is escaped
// (plus U+2028 and U+2029, which break JavaScript), so "<" and "&" stay
// readable.
func (e *encoder) string(s string) {
	const hex = "0123456789abcdef"
	e.buf = append(e.buf, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			e.buf = append(e.buf, '\\', byte(r))
		case r == '\n':
			e.buf = append(e.buf, '\\', 'n')
		case r == '\r':
			e.buf = append(e.buf, '\\', 'r')
		case r == '\t':
			e.buf = append(e.buf, '\\', 't')
		case r < 0x20:
			e.buf = append(e.buf, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
		case r == '\u2028' || r == '\u2029':
			e.buf = append(e.buf, `\u202`...)
			e.buf = append(e.buf, hex[r&0xf])
		default:
			e.buf = utf8.AppendRune(e.buf, r)
		}
	}
	e.buf = append(e.buf, '"')
}

// isTime reports whether fd holds unix nanoseconds rendered as RFC 3339.
func isTime(fd protoreflect.FieldDescriptor) bool {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strings.HasSuffix(string(fd.Name()), "_at")
	}
	return false
}

func compareKeys(k protoreflect.Kind, a, b protoreflect.MapKey) int {
	switch k {
	case protoreflect.BoolKind:
		return cmp.Compare(b2i(a.Bool()), b2i(b.Bool()))
	case protoreflect.StringKind:
		return strings.Compare(a.String(), b.String())
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return cmp.Compare(a.Uint(), b.Uint())
	default:
		return cmp.Compare(a.Int(), b.Int())
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func keyString(k protoreflect.Kind, key protoreflect.MapKey) string {
	switch k {
	case protoreflect.StringKind:
		return key.String()
	case protoreflect.BoolKind:
		return strconv.FormatBool(key.Bool())
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.FormatUint(key.Uint(), 10)
	default:
		return strconv.FormatInt(key.Int(), 10)
	}
}
