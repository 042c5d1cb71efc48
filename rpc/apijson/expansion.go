package apijson

import (
	"cmp"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// MaxExpansion bounds MarshalCompact's JSON of any message of type md by
// its protobuf encoding: at most factor bytes of JSON for each byte of
// protobuf, plus slack. The agent sizes its body limit from it, so that
// every job within server.job_max_size (a bound on its protobuf size)
// fits.
//
// Each byte of a protobuf encoding belongs to one field occurrence (a
// singular field, a list element, a map entry): its tag, its length and
// its value; its JSON is its name (once for a list or map), its value and
// a comma. A field that can occur once only (the root's own, and those of
// its singular messages) is slack: a constant, whatever the message. Every
// other occurrence is inside a list element or map entry, whose JSON over
// protobuf is bounded by choosing, of its fields, those that raise the
// ratio (each at its smallest encoding, where the name weighs most, or
// with a string of control characters, each \u00XX, 6 bytes per byte).
func MaxExpansion(md protoreflect.MessageDescriptor) (factor, slack int) {
	f, sl := rootBound(md, map[protoreflect.FullName]bool{})
	return int(math.Ceil(f)), int(math.Ceil(sl))
}

// contentRatio is the JSON per protobuf byte of a string's content (a
// control character is \u00XX).
const contentRatio = 6.0

// rootBound bounds a message that occurs once: its scalars are slack.
func rootBound(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) (factor, slack float64) {
	factor = contentRatio
	slack = 2 // {}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := float64(len(fd.Name()) + len(`"":,`))
		switch {
		case fd.IsList() || fd.IsMap():
			factor = max(factor, collectionBound(fd, seen))
		case isMessage(fd) && fd.Message().FullName() != configValueName:
			f, sl := rootBound(fd.Message(), seen)
			factor = max(factor, f)
			slack += name + sl
		default:
			j, _ := valueBound(fd)
			slack += name + j
		}
	}
	return factor, slack
}

// collectionBound bounds the JSON per protobuf byte of a list's elements or
// a map's entries, the list's or map's name counted with each.
func collectionBound(fd protoreflect.FieldDescriptor, seen map[protoreflect.FullName]bool) float64 {
	name := float64(len(fd.Name()) + len(`"":[],`))
	tag := float64(protowire.SizeTag(fd.Number()))
	if fd.IsMap() {
		// `"key":value,` per entry of at least a tag and a length (a key
		// and value at their defaults are left out); a key is text.
		kd, vd := fd.MapKey(), fd.MapValue()
		j, p := valueBound(vd)
		key := float64(len(`"":,`))
		if kd.Kind() != protoreflect.StringKind {
			key += 20 // the text of a number or boolean key of up to 10 varint bytes
		}
		r := (name + key + j) / (tag + 1 + p)
		if isMessage(vd) {
			r = max(r, elementBound(vd.Message(), name+key, tag+1, seen))
		}
		return r
	}
	if isMessage(fd) {
		return elementBound(fd.Message(), name+1, tag+1, seen)
	}
	j, p := valueBound(fd)
	if fd.IsPacked() {
		// One tag and length for the list; each element at least a byte.
		return max((name+j)/(tag+1+p), (j+1)/p)
	}
	return (name + j) / (tag + p)
}

// elementBound bounds the JSON per protobuf byte of a message that may
// occur any number of times, whose occurrence costs json bytes (its name,
// braces, comma) and proto bytes (its tag and length) of its own: its
// scalar fields are added, most expanding first, while they raise the
// ratio; a string's content, and a nested list or message, is bounded by
// its own ratio, and the whole by the largest.
func elementBound(md protoreflect.MessageDescriptor, json, proto float64, seen map[protoreflect.FullName]bool) float64 {
	if md.FullName() == configValueName {
		// A driver config's plain value: a string (6 per byte), a number
		// or boolean (its text: at most 20 bytes from a tag and a varint),
		// a duration's text (at most 25 bytes from a tag and a varint of 1
		// or more), a list or map of strings; null from an empty one.
		return max(contentRatio, (json+2)/(proto+2), (json+25)/(proto+2), json/proto)
	}
	if seen[md.FullName()] {
		return math.Inf(1) // a recursive message: no bound (none is in a job)
	}
	seen[md.FullName()] = true
	defer delete(seen, md.FullName())
	type pair struct{ json, proto float64 }
	var scalars []pair
	bound := contentRatio
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := float64(len(fd.Name()) + len(`"":,`))
		tag := float64(protowire.SizeTag(fd.Number()))
		switch {
		case fd.IsList() || fd.IsMap():
			bound = max(bound, collectionBound(fd, seen))
		case isMessage(fd):
			bound = max(bound, elementBound(fd.Message(), name+2, tag+1, seen))
		default:
			j, p := valueBound(fd)
			scalars = append(scalars, pair{name + j, tag + p})
		}
	}
	slices.SortFunc(scalars, func(a, b pair) int { return cmp.Compare(b.json/b.proto, a.json/a.proto) })
	for _, s := range scalars {
		if s.json/s.proto > json/proto {
			json, proto = json+s.json, proto+s.proto
		}
	}
	return max(bound, json/proto)
}

// valueBound is the longest JSON of fd's value at its smallest protobuf
// encoding (the length byte of an empty string or message, one varint
// byte), with that encoding's size. A longer value weighs less per byte.
func valueBound(fd protoreflect.FieldDescriptor) (json, proto float64) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return float64(len("false")), 1
	case protoreflect.EnumKind:
		longest := len("-2147483648") // an unnamed value is its number (10 varint bytes)
		n := 0
		for _, w := range EnumWords(fd.Enum(), true) {
			n = max(n, len(w)+2)
		}
		return float64(max(n, longest/10+1)), 1
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if isTime(fd) {
			return float64(len(`"2006-01-02T15:04:05.999999999Z"`)), 1
		}
		return 4, 1 // up to 127 or -64 from one byte; more bytes, fewer digits each
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		return 4, 1
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return float64(len("-3.4028235e+38")), 4
	case protoreflect.Fixed64Kind, protoreflect.DoubleKind:
		return float64(len("-1.7976931348623157e+308")), 8
	case protoreflect.StringKind:
		return 2, 1 // "" from a length byte; each byte after, at most 6
	case protoreflect.BytesKind:
		return 2, 1 // base64: 4 bytes per 3
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if fd.Message().FullName() == configValueName {
			return float64(len("null")), 1
		}
		return 2, 1 // {} from a length byte; its fields are bounded in turn
	}
	return 24, 1
}
