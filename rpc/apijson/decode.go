package apijson

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Error is a value Unmarshal refused, or one Marshal could not render.
type Error struct {
	// Path locates the value in the JSON document: fields joined by '.',
	// list items as [3], map entries as ["key"]; "" is the document itself.
	Path string
	Msg  string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Unmarshal parses the JSON of one message into m, which is reset first.
func Unmarshal(b []byte, m proto.Message) error {
	d := newDecoder(b)
	proto.Reset(m)
	tok, err := d.token("")
	if err != nil {
		return err
	}
	if err := d.message(m.ProtoReflect(), tok, ""); err != nil {
		return err
	}
	return d.end()
}

// UnmarshalList parses a JSON array of messages, each made by newMsg.
func UnmarshalList[M proto.Message](b []byte, newMsg func() M) ([]M, error) {
	d := newDecoder(b)
	tok, err := d.token("")
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('[') {
		return nil, &Error{Msg: "expected an array, got " + describe(tok)}
	}
	var out []M
	for i := 0; ; i++ {
		path := "[" + strconv.Itoa(i) + "]"
		tok, err := d.token(path)
		if err != nil {
			return nil, err
		}
		if tok == json.Delim(']') {
			break
		}
		m := newMsg()
		if err := d.message(m.ProtoReflect(), tok, path); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if out == nil {
		out = []M{}
	}
	return out, d.end()
}

type decoder struct {
	dec *json.Decoder
}

func newDecoder(b []byte) *decoder {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return &decoder{dec: dec}
}

// token reads the next token; a syntax error names the path being read.
func (d *decoder) token(path string) (json.Token, error) {
	tok, err := d.dec.Token()
	if errors.Is(err, io.EOF) {
		return nil, &Error{Path: path, Msg: "unexpected end of JSON"}
	}
	if err != nil {
		return nil, &Error{Path: path, Msg: fmt.Sprintf("invalid JSON at offset %d: %v", d.dec.InputOffset(), err)}
	}
	return tok, nil
}

func (d *decoder) end() error {
	if _, err := d.dec.Token(); !errors.Is(err, io.EOF) {
		return &Error{Msg: fmt.Sprintf("unexpected data after the JSON value at offset %d", d.dec.InputOffset())}
	}
	return nil
}

func (d *decoder) message(m protoreflect.Message, tok json.Token, path string) error {
	if tok != json.Delim('{') {
		return &Error{Path: path, Msg: "expected an object, got " + describe(tok)}
	}
	fields := m.Descriptor().Fields()
	seen := map[protoreflect.Name]bool{}
	oneofs := map[protoreflect.FullName]protoreflect.Name{}
	for {
		tok, err := d.token(path)
		if err != nil {
			return err
		}
		if tok == json.Delim('}') {
			return nil
		}
		key, _ := tok.(string) // the decoder only yields string keys
		fpath := join(path, key)
		fd := fields.ByName(protoreflect.Name(key))
		if fd == nil {
			return &Error{Path: fpath, Msg: fmt.Sprintf("unknown field of %s", m.Descriptor().Name())}
		}
		if seen[fd.Name()] {
			return &Error{Path: fpath, Msg: "field given twice"}
		}
		seen[fd.Name()] = true
		vtok, err := d.token(fpath)
		if err != nil {
			return err
		}
		if vtok == nil {
			continue // null: the field stays unset or empty
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if other, ok := oneofs[od.FullName()]; ok {
				return &Error{Path: fpath, Msg: fmt.Sprintf("%s and %s are both set, but only one of %s may be", other, fd.Name(), od.Name())}
			}
			oneofs[od.FullName()] = fd.Name()
		}
		if err := d.field(m, fd, vtok, fpath); err != nil {
			return err
		}
	}
}

func (d *decoder) field(m protoreflect.Message, fd protoreflect.FieldDescriptor, tok json.Token, path string) error {
	t := isTime(fd)
	switch {
	case fd.IsList():
		if tok != json.Delim('[') {
			return &Error{Path: path, Msg: "expected an array, got " + describe(tok)}
		}
		l := m.Mutable(fd).List()
		for i := 0; ; i++ {
			ipath := path + "[" + strconv.Itoa(i) + "]"
			tok, err := d.token(ipath)
			if err != nil {
				return err
			}
			if tok == json.Delim(']') {
				return nil
			}
			var v protoreflect.Value
			if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
				v = l.NewElement()
				err = d.message(v.Message(), tok, ipath)
			} else {
				v, err = scalar(fd, tok, t, ipath)
			}
			if err != nil {
				return err
			}
			l.Append(v)
		}
	case fd.IsMap():
		return d.mapValue(m, fd, tok, t, path)
	case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
		return d.message(m.Mutable(fd).Message(), tok, path)
	}
	v, err := scalar(fd, tok, t, path)
	if err != nil {
		return err
	}
	m.Set(fd, v)
	return nil
}

func (d *decoder) mapValue(m protoreflect.Message, fd protoreflect.FieldDescriptor, tok json.Token, t bool, path string) error {
	if tok != json.Delim('{') {
		return &Error{Path: path, Msg: "expected an object, got " + describe(tok)}
	}
	mp := m.Mutable(fd).Map()
	kd, vd := fd.MapKey(), fd.MapValue()
	for {
		tok, err := d.token(path)
		if err != nil {
			return err
		}
		if tok == json.Delim('}') {
			return nil
		}
		ks, _ := tok.(string)
		kpath := path + "[" + strconv.Quote(ks) + "]"
		key, err := parseKey(kd.Kind(), ks)
		if err != nil {
			return &Error{Path: kpath, Msg: err.Error()}
		}
		if mp.Has(key) {
			return &Error{Path: kpath, Msg: "key given twice"}
		}
		vtok, err := d.token(kpath)
		if err != nil {
			return err
		}
		if vtok == nil {
			return &Error{Path: kpath, Msg: "null is not a valid map value"}
		}
		var v protoreflect.Value
		if vd.Kind() == protoreflect.MessageKind || vd.Kind() == protoreflect.GroupKind {
			v = mp.NewValue()
			err = d.message(v.Message(), vtok, kpath)
		} else {
			v, err = scalar(vd, vtok, t, kpath)
		}
		if err != nil {
			return err
		}
		mp.Set(key, v)
	}
}

func parseKey(k protoreflect.Kind, s string) (protoreflect.MapKey, error) {
	switch k {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(s).MapKey(), nil
	case protoreflect.BoolKind:
		switch s {
		case "true":
			return protoreflect.ValueOfBool(true).MapKey(), nil
		case "false":
			return protoreflect.ValueOfBool(false).MapKey(), nil
		}
		return protoreflect.MapKey{}, fmt.Errorf("map key %q is not true or false", s)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return protoreflect.MapKey{}, fmt.Errorf("map key %q is not a 32-bit integer", s)
		}
		return protoreflect.ValueOfInt32(int32(n)).MapKey(), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return protoreflect.MapKey{}, fmt.Errorf("map key %q is not a 64-bit integer", s)
		}
		return protoreflect.ValueOfInt64(n).MapKey(), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return protoreflect.MapKey{}, fmt.Errorf("map key %q is not an unsigned 32-bit integer", s)
		}
		return protoreflect.ValueOfUint32(uint32(n)).MapKey(), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return protoreflect.MapKey{}, fmt.Errorf("map key %q is not an unsigned 64-bit integer", s)
		}
		return protoreflect.ValueOfUint64(n).MapKey(), nil
	}
	return protoreflect.MapKey{}, fmt.Errorf("map key kind %s is not supported", k)
}

// Bounds of a time that int64 unix nanoseconds can hold.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

func scalar(fd protoreflect.FieldDescriptor, tok json.Token, t bool, path string) (protoreflect.Value, error) {
	bad := func(want string) (protoreflect.Value, error) {
		return protoreflect.Value{}, &Error{Path: path, Msg: "expected " + want + ", got " + describe(tok)}
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		if b, ok := tok.(bool); ok {
			return protoreflect.ValueOfBool(b), nil
		}
		return bad("true or false")
	case protoreflect.EnumKind:
		switch x := tok.(type) {
		case string:
			if n, ok := EnumNumber(fd.Enum(), x); ok {
				return protoreflect.ValueOfEnum(n), nil
			}
			return protoreflect.Value{}, &Error{Path: path, Msg: fmt.Sprintf("unknown value %q (want one of %s)", x, strings.Join(EnumWords(fd.Enum(), true), ", "))}
		case json.Number:
			n, err := strconv.ParseInt(string(x), 10, 32)
			if err != nil {
				return protoreflect.Value{}, &Error{Path: path, Msg: fmt.Sprintf("enum number %s is not a 32-bit integer", x)}
			}
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(n)), nil
		}
		return bad("a word such as " + strconv.Quote(firstWord(fd.Enum())))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		n, err := parseInt(tok, 32, path)
		return protoreflect.ValueOfInt32(int32(n)), err
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if !t {
			n, err := parseInt(tok, 64, path)
			return protoreflect.ValueOfInt64(n), err
		}
		s, ok := tok.(string)
		if !ok {
			return bad(`an RFC 3339 time such as "2026-11-23T20:34:35.61Z"`)
		}
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return protoreflect.Value{}, &Error{Path: path, Msg: fmt.Sprintf("%q is not an RFC 3339 time such as \"2026-11-23T20:34:35.61Z\"", s)}
		}
		if ts.Before(minTime) || ts.After(maxTime) {
			return protoreflect.Value{}, &Error{Path: path, Msg: fmt.Sprintf("time %s is outside the years 1678 to 2262", s)}
		}
		return protoreflect.ValueOfInt64(ts.UnixNano()), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		n, err := parseUint(tok, 32, path)
		return protoreflect.ValueOfUint32(uint32(n)), err
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		n, err := parseUint(tok, 64, path)
		return protoreflect.ValueOfUint64(n), err
	case protoreflect.FloatKind:
		f, err := parseFloat(tok, 32, path)
		return protoreflect.ValueOfFloat32(float32(f)), err
	case protoreflect.DoubleKind:
		f, err := parseFloat(tok, 64, path)
		return protoreflect.ValueOfFloat64(f), err
	case protoreflect.StringKind:
		if s, ok := tok.(string); ok {
			return protoreflect.ValueOfString(s), nil
		}
		return bad("a string")
	case protoreflect.BytesKind:
		s, ok := tok.(string)
		if !ok {
			return bad("a base64 string")
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return protoreflect.Value{}, &Error{Path: path, Msg: fmt.Sprintf("not standard base64: %v", err)}
		}
		return protoreflect.ValueOfBytes(b), nil
	}
	return protoreflect.Value{}, &Error{Path: path, Msg: fmt.Sprintf("field kind %s is not supported", fd.Kind())}
}

func firstWord(ed protoreflect.EnumDescriptor) string {
	if ws := EnumWords(ed, false); len(ws) > 0 {
		return ws[0]
	}
	return "unspecified"
}

func parseInt(tok json.Token, bits int, path string) (int64, error) {
	num, ok := tok.(json.Number)
	if !ok {
		return 0, &Error{Path: path, Msg: "expected an integer, got " + describe(tok)}
	}
	n, err := strconv.ParseInt(string(num), 10, bits)
	if err != nil {
		return 0, &Error{Path: path, Msg: fmt.Sprintf("%s is not a %d-bit integer", num, bits)}
	}
	return n, nil
}

func parseUint(tok json.Token, bits int, path string) (uint64, error) {
	num, ok := tok.(json.Number)
	if !ok {
		return 0, &Error{Path: path, Msg: "expected a non-negative integer, got " + describe(tok)}
	}
	n, err := strconv.ParseUint(string(num), 10, bits)
	if err != nil {
		return 0, &Error{Path: path, Msg: fmt.Sprintf("%s is not an unsigned %d-bit integer", num, bits)}
	}
	return n, nil
}

func parseFloat(tok json.Token, bits int, path string) (float64, error) {
	switch x := tok.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), bits)
		if err != nil {
			return 0, &Error{Path: path, Msg: fmt.Sprintf("%s is out of range for a %d-bit float", x, bits)}
		}
		return f, nil
	case string:
		switch x {
		case "NaN":
			return math.NaN(), nil
		case "Infinity":
			return math.Inf(1), nil
		case "-Infinity":
			return math.Inf(-1), nil
		}
	}
	return 0, &Error{Path: path, Msg: `expected a number, "NaN", "Infinity" or "-Infinity", got ` + describe(tok)}
}

// describe names a token's JSON type for error messages.
func describe(tok json.Token) string {
	switch x := tok.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return "the number " + string(x)
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return "the string " + strconv.Quote(x)
	case json.Delim:
		switch x {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return "the end of a container"
	}
	return fmt.Sprintf("%v", tok)
}
