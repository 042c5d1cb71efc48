package apijson

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/sdk/driverpb"
)

// A driver's task config (driverpb.ConfigValue, the values of Task.config
// and of a driver schema's defaults) is written as the plain JSON value a
// user writes in a job file, not as the oneof that carries it over the
// wire: "command": "sleep", "args": ["-c", "x"], "port": 8080,
// "privileged": false, "labels": {"a": "b"}. A duration is written as Go
// writes one ("30s"); it reads back as that string, which the driver's
// schema turns into a duration again when the job is checked. An empty
// value is null.

var configValueName = (&driverpb.ConfigValue{}).ProtoReflect().Descriptor().FullName()

// configValue reports whether m is a driver config value.
func configValue(m protoreflect.Message) (*driverpb.ConfigValue, bool) {
	cv, ok := m.Interface().(*driverpb.ConfigValue)
	return cv, ok
}

func (e *encoder) configValue(cv *driverpb.ConfigValue, depth int, p *path) error {
	switch k := cv.GetKind().(type) {
	case *driverpb.ConfigValue_StringValue:
		if err := e.checkUTF8(k.StringValue, p); err != nil {
			return err
		}
		e.string(k.StringValue)
	case *driverpb.ConfigValue_IntValue:
		e.buf = strconv.AppendInt(e.buf, k.IntValue, 10)
	case *driverpb.ConfigValue_BoolValue:
		e.buf = strconv.AppendBool(e.buf, k.BoolValue)
	case *driverpb.ConfigValue_DurationNanos:
		e.string(time.Duration(k.DurationNanos).String())
	case *driverpb.ConfigValue_ListValue:
		vs := k.ListValue.GetValues()
		if len(vs) == 0 {
			e.buf = append(e.buf, "[]"...)
			return nil
		}
		e.buf = append(e.buf, '[')
		for i, s := range vs {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.newline(depth + 1)
			if err := e.checkUTF8(s, &path{parent: p, index: i, kind: pathIndex}); err != nil {
				return err
			}
			e.string(s)
		}
		e.newline(depth)
		e.buf = append(e.buf, ']')
	case *driverpb.ConfigValue_MapValue:
		vs := k.MapValue.GetValues()
		if len(vs) == 0 {
			e.buf = append(e.buf, "{}"...)
			return nil
		}
		keys := make([]string, 0, len(vs))
		for key := range vs {
			keys = append(keys, key)
		}
		slices.Sort(keys)
		e.buf = append(e.buf, '{')
		for i, key := range keys {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.newline(depth + 1)
			kp := &path{parent: p, name: key, kind: pathKey}
			if err := e.checkUTF8(key, p); err != nil {
				return err
			}
			e.string(key)
			e.buf = append(e.buf, ": "...)
			if err := e.checkUTF8(vs[key], kp); err != nil {
				return err
			}
			e.string(vs[key])
		}
		e.newline(depth)
		e.buf = append(e.buf, '}')
	default:
		e.buf = append(e.buf, "null"...)
	}
	return nil
}

// configValue reads a plain JSON value into cv: a string, an integer, a
// boolean, an array of strings or an object of strings; null leaves it
// empty.
func (d *decoder) configValue(cv *driverpb.ConfigValue, tok token, p *path) error {
	switch tok.kind {
	case tokNull:
	case tokString:
		cv.Kind = &driverpb.ConfigValue_StringValue{StringValue: tok.text}
	case tokNumber:
		n, err := strconv.ParseInt(tok.text, 10, 64)
		if err != nil {
			return &Error{Path: p.String(), Msg: fmt.Sprintf("%s is not a 64-bit integer (a driver config number is a whole number)", tok.text)}
		}
		cv.Kind = &driverpb.ConfigValue_IntValue{IntValue: n}
	case tokTrue, tokFalse:
		cv.Kind = &driverpb.ConfigValue_BoolValue{BoolValue: tok.kind == tokTrue}
	case tokBeginArray:
		l := &driverpb.StringList{Values: []string{}}
		err := d.array(p, func(ip *path, tok token) error {
			if tok.kind != tokString {
				return &Error{Path: ip.String(), Msg: "expected a string (a driver config list holds strings), got " + describe(tok)}
			}
			l.Values = append(l.Values, tok.text)
			return nil
		})
		if err != nil {
			return err
		}
		cv.Kind = &driverpb.ConfigValue_ListValue{ListValue: l}
	case tokBeginObject:
		mp := &driverpb.StringMap{Values: map[string]string{}}
		err := d.object(p, pathKey, func(key string, tok token) error {
			kp := &path{parent: p, name: key, kind: pathKey}
			if _, dup := mp.Values[key]; dup {
				return &Error{Path: kp.String(), Msg: "key given twice"}
			}
			if tok.kind != tokString {
				return &Error{Path: kp.String(), Msg: "expected a string (a driver config map holds strings), got " + describe(tok)}
			}
			mp.Values[key] = tok.text
			return nil
		})
		if err != nil {
			return err
		}
		cv.Kind = &driverpb.ConfigValue_MapValue{MapValue: mp}
	default:
		return &Error{Path: p.String(), Msg: "expected a driver config value (a string, an integer, true or false, a list or a map of strings), got " + describe(tok)}
	}
	return nil
}
