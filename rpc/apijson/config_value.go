package apijson

import (
	"fmt"
	"math/big"
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
			if err := e.checkUTF8(key, kp); err != nil {
				return err
			}
			e.string(key)
			e.colon()
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

// configValue reads a plain JSON value into cv as a job file's config
// reads (host/jobspec): a string, a whole number (1.0 and 1e3 are whole), a
// boolean, or a list or map of strings in which a number or boolean stands
// for its text (["-p", 8080] is ["-p", "8080"]). A null leaves cv empty; a
// null config key is dropped by mapValue, as HCL drops it.
func (d *decoder) configValue(cv *driverpb.ConfigValue, tok token, p *path) error {
	switch tok.kind {
	case tokNull:
	case tokString:
		cv.Kind = &driverpb.ConfigValue_StringValue{StringValue: tok.text}
	case tokNumber:
		n, err := wholeNumber(tok.text)
		if err != nil {
			return &Error{Path: p.String(), Msg: err.Error()}
		}
		cv.Kind = &driverpb.ConfigValue_IntValue{IntValue: n}
	case tokTrue, tokFalse:
		cv.Kind = &driverpb.ConfigValue_BoolValue{BoolValue: tok.kind == tokTrue}
	case tokBeginArray:
		l := &driverpb.StringList{Values: []string{}}
		err := d.array(p, func(ip *path, tok token) error {
			s, err := primitiveText(tok, "list")
			if err != nil {
				return &Error{Path: ip.String(), Msg: err.Error()}
			}
			l.Values = append(l.Values, s)
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
			s, err := primitiveText(tok, "map")
			if err != nil {
				return &Error{Path: kp.String(), Msg: err.Error()}
			}
			mp.Values[key] = s
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

// maxNumberExp bounds a config number's binary exponent, as host/jobspec
// does: spelling out 1e9999999 would take seconds and megabytes, and no
// sensible value is that large or that small.
const maxNumberExp = 1024

// parseNumber reads a JSON number as HCL does (cty: 512 bits of precision).
func parseNumber(text string) (*big.Float, error) {
	bf, _, err := big.ParseFloat(text, 10, 512, big.ToNearestEven)
	if err != nil {
		return nil, fmt.Errorf("%s is not a number", text)
	}
	if exp := bf.MantExp(nil); exp > maxNumberExp || exp < -maxNumberExp {
		return nil, fmt.Errorf("number %s is out of range", text)
	}
	return bf, nil
}

// wholeNumber reads a config number that must be a 64-bit whole number,
// however it is written (8080, 8080.0, 8.08e3), as host/jobspec's
// wholeNumber64 does.
func wholeNumber(text string) (int64, error) {
	bf, err := parseNumber(text)
	if err != nil {
		return 0, err
	}
	if !bf.IsInt() {
		return 0, fmt.Errorf("%s is not a 64-bit integer (a driver config number is a whole number)", text)
	}
	n, acc := bf.Int64()
	if acc != big.Exact {
		return 0, fmt.Errorf("%s is not a 64-bit integer", text)
	}
	return n, nil
}

// primitiveText is a string, number or boolean inside a config list or map
// as text, as host/jobspec's primitiveText makes it (cty's conversion of a
// number to a string). in names the list or map it is in, for the error.
func primitiveText(tok token, in string) (string, error) {
	switch tok.kind {
	case tokString:
		return tok.text, nil
	case tokTrue:
		return "true", nil
	case tokFalse:
		return "false", nil
	case tokNumber:
		bf, err := parseNumber(tok.text)
		if err != nil {
			return "", err
		}
		return bf.Text('f', -1), nil
	}
	return "", fmt.Errorf("expected a string (a driver config %s holds strings; a number or boolean stands for its text), got %s", in, describe(tok))
}
