package apijson

import (
	"encoding/base64"
	"fmt"
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
	d := &decoder{s: scanner{data: b}}
	proto.Reset(m)
	tok, err := d.token(nil)
	if err != nil {
		return err
	}
	if err := d.message(m.ProtoReflect(), tok, nil); err != nil {
		return err
	}
	return d.end()
}

// UnmarshalList parses a JSON array of messages, each made by newMsg.
func UnmarshalList[M proto.Message](b []byte, newMsg func() M) ([]M, error) {
	d := &decoder{s: scanner{data: b}}
	tok, err := d.token(nil)
	if err != nil {
		return nil, err
	}
	if tok.kind != tokBeginArray {
		return nil, &Error{Msg: "expected an array, got " + describe(tok)}
	}
	out := []M{}
	err = d.array(nil, func(ip *path, tok token) error {
		m := newMsg()
		if err := d.message(m.ProtoReflect(), tok, ip); err != nil {
			return err
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, d.end()
}

type decoder struct {
	s scanner
}

// token reads the next token; a syntax error names the path being read.
func (d *decoder) token(p *path) (token, error) {
	tok, err := d.s.next()
	if err != nil {
		return token{}, &Error{Path: p.String(), Msg: err.Error()}
	}
	if tok.kind == tokEOF {
		return token{}, &Error{Path: p.String(), Msg: "unexpected end of JSON"}
	}
	return tok, nil
}

func (d *decoder) end() error {
	tok, err := d.s.next()
	if err != nil || tok.kind != tokEOF {
		return &Error{Msg: fmt.Sprintf("unexpected data after the JSON value at offset %d", d.s.pos)}
	}
	return nil
}

// object reads the members of an object whose '{' was just read, calling
// fn with each key and the first token of its value, which fn consumes;
// keys says how a key extends the path (a field name or a map key).
func (d *decoder) object(p *path, keys pathKind, fn func(key string, val token) error) error {
	for first := true; ; first = false {
		tok, err := d.token(p)
		if err != nil {
			return err
		}
		if first && tok.kind == tokEndObject {
			return nil
		}
		if tok.kind != tokString {
			return &Error{Path: p.String(), Msg: "expected a quoted field name, got " + describe(tok)}
		}
		if colon, err := d.token(p); err != nil {
			return err
		} else if colon.kind != tokColon {
			return &Error{Path: p.String(), Msg: fmt.Sprintf("expected ':' after %q, got %s", tok.text, describe(colon))}
		}
		val, err := d.token(&path{parent: p, name: tok.text, kind: keys})
		if err != nil {
			return err
		}
		if err := fn(tok.text, val); err != nil {
			return err
		}
		sep, err := d.token(p)
		if err != nil {
			return err
		}
		switch sep.kind {
		case tokEndObject:
			return nil
		case tokComma:
		default:
			return &Error{Path: p.String(), Msg: "expected ',' or '}' after a value, got " + describe(sep)}
		}
	}
}

// array reads the items of an array whose '[' was just read, calling fn
// with each item's path and first token, which fn consumes.
func (d *decoder) array(p *path, fn func(ip *path, val token) error) error {
	for i := 0; ; i++ {
		ip := &path{parent: p, index: i, kind: pathIndex}
		tok, err := d.token(ip)
		if err != nil {
			return err
		}
		if i == 0 && tok.kind == tokEndArray {
			return nil
		}
		if err := fn(ip, tok); err != nil {
			return err
		}
		sep, err := d.token(p)
		if err != nil {
			return err
		}
		switch sep.kind {
		case tokEndArray:
			return nil
		case tokComma:
		default:
			return &Error{Path: p.String(), Msg: "expected ',' or ']' after an item, got " + describe(sep)}
		}
	}
}

func (d *decoder) message(m protoreflect.Message, tok token, p *path) error {
	if cv, ok := configValue(m); ok {
		return d.configValue(cv, tok, p)
	}
	if tok.kind != tokBeginObject {
		return &Error{Path: p.String(), Msg: "expected an object, got " + describe(tok)}
	}
	md := m.Descriptor()
	fields := md.Fields()
	// Fields seen so far, by index (a message has few fields).
	seen := make([]bool, fields.Len())
	var oneofs map[protoreflect.FullName]protoreflect.Name
	return d.object(p, pathField, func(key string, val token) error {
		fp := &path{parent: p, name: key}
		fd := fields.ByName(protoreflect.Name(key))
		if fd == nil {
			return &Error{Path: fp.String(), Msg: fmt.Sprintf("unknown field of %s", md.Name())}
		}
		if seen[fd.Index()] {
			return &Error{Path: fp.String(), Msg: "field given twice"}
		}
		seen[fd.Index()] = true
		if val.kind == tokNull {
			return nil // the field stays unset or empty
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if other, ok := oneofs[od.FullName()]; ok {
				return &Error{Path: fp.String(), Msg: fmt.Sprintf("%s and %s are both set, but only one of %s may be", other, fd.Name(), od.Name())}
			}
			if oneofs == nil {
				oneofs = map[protoreflect.FullName]protoreflect.Name{}
			}
			oneofs[od.FullName()] = fd.Name()
		}
		return d.field(m, fd, val, fp)
	})
}

func isMessage(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind
}

func (d *decoder) field(m protoreflect.Message, fd protoreflect.FieldDescriptor, tok token, p *path) error {
	t := isTime(fd)
	switch {
	case fd.IsList():
		if tok.kind != tokBeginArray {
			return &Error{Path: p.String(), Msg: "expected an array, got " + describe(tok)}
		}
		l := m.Mutable(fd).List()
		return d.array(p, func(ip *path, tok token) error {
			var v protoreflect.Value
			var err error
			if isMessage(fd) {
				v = l.NewElement()
				err = d.message(v.Message(), tok, ip)
			} else {
				v, err = scalar(fd, tok, t, ip)
			}
			if err != nil {
				return err
			}
			l.Append(v)
			return nil
		})
	case fd.IsMap():
		return d.mapValue(m, fd, tok, t, p)
	case isMessage(fd):
		return d.message(m.Mutable(fd).Message(), tok, p)
	}
	v, err := scalar(fd, tok, t, p)
	if err != nil {
		return err
	}
	m.Set(fd, v)
	return nil
}

func (d *decoder) mapValue(m protoreflect.Message, fd protoreflect.FieldDescriptor, tok token, t bool, p *path) error {
	if tok.kind != tokBeginObject {
		return &Error{Path: p.String(), Msg: "expected an object, got " + describe(tok)}
	}
	mp := m.Mutable(fd).Map()
	kd, vd := fd.MapKey(), fd.MapValue()
	nulls := map[string]bool{}
	return d.object(p, pathKey, func(ks string, vtok token) error {
		kp := &path{parent: p, name: ks, kind: pathKey}
		key, err := parseKey(kd.Kind(), ks)
		if err != nil {
			return &Error{Path: kp.String(), Msg: err.Error()}
		}
		if mp.Has(key) {
			return &Error{Path: kp.String(), Msg: "key given twice"}
		}
		if vtok.kind == tokNull {
			// A null driver config key is absent, so its default applies,
			// as in a job file (HCL drops it).
			if isMessage(vd) && vd.Message().FullName() == configValueName {
				if nulls[ks] {
					return &Error{Path: kp.String(), Msg: "key given twice"}
				}
				nulls[ks] = true
				return nil
			}
			return &Error{Path: kp.String(), Msg: "null is not a valid map value"}
		}
		if nulls[ks] {
			return &Error{Path: kp.String(), Msg: "key given twice"}
		}
		var v protoreflect.Value
		if isMessage(vd) {
			v = mp.NewValue()
			err = d.message(v.Message(), vtok, kp)
		} else {
			v, err = scalar(vd, vtok, t, kp)
		}
		if err != nil {
			return err
		}
		mp.Set(key, v)
		return nil
	})
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

func scalar(fd protoreflect.FieldDescriptor, tok token, t bool, p *path) (protoreflect.Value, error) {
	bad := func(want string) (protoreflect.Value, error) {
		return protoreflect.Value{}, &Error{Path: p.String(), Msg: "expected " + want + ", got " + describe(tok)}
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		switch tok.kind {
		case tokTrue:
			return protoreflect.ValueOfBool(true), nil
		case tokFalse:
			return protoreflect.ValueOfBool(false), nil
		}
		return bad("true or false")
	case protoreflect.EnumKind:
		switch x := tok.text; tok.kind {
		case tokString:
			if n, ok := EnumNumber(fd.Enum(), x); ok {
				return protoreflect.ValueOfEnum(n), nil
			}
			return protoreflect.Value{}, &Error{Path: p.String(), Msg: fmt.Sprintf("unknown value %q (want one of %s)", x, strings.Join(EnumWords(fd.Enum(), true), ", "))}
		case tokNumber:
			n, err := strconv.ParseInt(x, 10, 32)
			if err != nil {
				return protoreflect.Value{}, &Error{Path: p.String(), Msg: fmt.Sprintf("enum number %s is not a 32-bit integer", x)}
			}
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(n)), nil
		}
		return bad("a word such as " + strconv.Quote(firstWord(fd.Enum())))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		n, err := parseInt(tok, 32, p)
		return protoreflect.ValueOfInt32(int32(n)), err
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if !t {
			n, err := parseInt(tok, 64, p)
			return protoreflect.ValueOfInt64(n), err
		}
		s, ok := tok.text, tok.kind == tokString
		if !ok {
			return bad(`an RFC 3339 time such as "2026-11-23T20:34:35.61Z"`)
		}
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return protoreflect.Value{}, &Error{Path: p.String(), Msg: fmt.Sprintf("%q is not an RFC 3339 time such as \"2026-11-23T20:34:35.61Z\"", s)}
		}
		if msg := timeProblem(s); msg != "" {
			return protoreflect.Value{}, &Error{Path: p.String(), Msg: fmt.Sprintf("time %q %s", s, msg)}
		}
		if ts.Before(minTime) || ts.After(maxTime) {
			return protoreflect.Value{}, &Error{Path: p.String(), Msg: fmt.Sprintf("time %s is outside the years 1678 to 2262", s)}
		}
		return protoreflect.ValueOfInt64(ts.UnixNano()), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		n, err := parseUint(tok, 32, p)
		return protoreflect.ValueOfUint32(uint32(n)), err
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		n, err := parseUint(tok, 64, p)
		return protoreflect.ValueOfUint64(n), err
	case protoreflect.FloatKind:
		f, err := parseFloat(tok, 32, p)
		return protoreflect.ValueOfFloat32(float32(f)), err
	case protoreflect.DoubleKind:
		f, err := parseFloat(tok, 64, p)
		return protoreflect.ValueOfFloat64(f), err
	case protoreflect.StringKind:
		if tok.kind == tokString {
			return protoreflect.ValueOfString(tok.text), nil
		}
		return bad("a string")
	case protoreflect.BytesKind:
		s, ok := tok.text, tok.kind == tokString
		if !ok {
			return bad("a base64 string")
		}
		// Strict refuses padding bits that are not zero ("AR==" would
		// otherwise read as [1], like "AQ=="), and the decoder skips \r and
		// \n even then, so they are refused first: one value, one spelling.
		if i := strings.IndexAny(s, "\r\n"); i >= 0 {
			return protoreflect.Value{}, &Error{Path: p.String(), Msg: fmt.Sprintf("not standard base64: line break at byte %d", i)}
		}
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return protoreflect.Value{}, &Error{Path: p.String(), Msg: fmt.Sprintf("not standard base64: %v", err)}
		}
		return protoreflect.ValueOfBytes(b), nil
	}
	return protoreflect.Value{}, &Error{Path: p.String(), Msg: fmt.Sprintf("field kind %s is not supported", fd.Kind())}
}

// timeProblem says what is wrong with s, a time time.Parse accepted, or ""
// when nothing is. time.Parse takes a one-digit hour, drops fractional
// digits beyond the ninth and takes a decimal comma; each would let two
// spellings mean one instant, or make a time read back differently from
// what was written, so each is refused.
func timeProblem(s string) string {
	const shape = "0000-00-00T00:00:00"
	if len(s) <= len(shape) {
		return "is not of the form 2026-11-23T20:34:35Z"
	}
	for i := range len(shape) {
		if want, c := shape[i], s[i]; (want == '0' && (c < '0' || c > '9')) || (want != '0' && c != want) {
			return "is not of the form 2026-11-23T20:34:35Z (two digits for each of month, day, hour, minute and second)"
		}
	}
	switch s[len(shape)] {
	case ',':
		return "has a decimal comma; RFC 3339 separates the fraction of a second with '.'"
	case '.':
		digits := 0
		for _, c := range s[len(shape)+1:] {
			if c < '0' || c > '9' {
				break
			}
			digits++
		}
		if digits > 9 {
			return fmt.Sprintf("has %d fractional digits; at most 9 (nanoseconds) are read exactly", digits)
		}
	}
	return ""
}

func firstWord(ed protoreflect.EnumDescriptor) string {
	if ws := EnumWords(ed, false); len(ws) > 0 {
		return ws[0]
	}
	return "unspecified"
}

func parseInt(tok token, bits int, p *path) (int64, error) {
	num := tok.text
	if tok.kind != tokNumber {
		return 0, &Error{Path: p.String(), Msg: "expected an integer, got " + describe(tok)}
	}
	n, err := strconv.ParseInt(num, 10, bits)
	if err != nil {
		return 0, &Error{Path: p.String(), Msg: fmt.Sprintf("%s is not a %d-bit integer", num, bits)}
	}
	return n, nil
}

func parseUint(tok token, bits int, p *path) (uint64, error) {
	num := tok.text
	if tok.kind != tokNumber {
		return 0, &Error{Path: p.String(), Msg: "expected a non-negative integer, got " + describe(tok)}
	}
	n, err := strconv.ParseUint(num, 10, bits)
	if err != nil {
		return 0, &Error{Path: p.String(), Msg: fmt.Sprintf("%s is not an unsigned %d-bit integer", num, bits)}
	}
	return n, nil
}

func parseFloat(tok token, bits int, p *path) (float64, error) {
	switch x := tok.text; tok.kind {
	case tokNumber:
		f, err := strconv.ParseFloat(x, bits)
		if err != nil {
			return 0, &Error{Path: p.String(), Msg: fmt.Sprintf("%s is out of range for a %d-bit float", x, bits)}
		}
		return f, nil
	case tokString:
		switch x {
		case "NaN":
			return math.NaN(), nil
		case "Infinity":
			return math.Inf(1), nil
		case "-Infinity":
			return math.Inf(-1), nil
		}
	}
	return 0, &Error{Path: p.String(), Msg: `expected a number, "NaN", "Infinity" or "-Infinity", got ` + describe(tok)}
}

// describe names a token's JSON type for error messages.
func describe(tok token) string {
	switch tok.kind {
	case tokNull:
		return "null"
	case tokTrue:
		return "true"
	case tokFalse:
		return "false"
	case tokNumber:
		return "the number " + tok.text
	case tokString:
		x := tok.text
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return "the string " + strconv.Quote(x)
	case tokBeginObject:
		return "an object"
	case tokBeginArray:
		return "an array"
	case tokEndObject:
		return "'}'"
	case tokEndArray:
		return "']'"
	case tokColon:
		return "':'"
	case tokComma:
		return "','"
	}
	return "the end of the JSON"
}
