package pb

import (
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// EnumWord is an enum value as the API writes it (the one spelling of
// berth's enum values; it lives beside the enums so every layer, the JSON
// codec included, can use it without importing anything above rpc/): its name without the
// enum's prefix, lowercased, "_" as "-" ("single-node-writer" for
// VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, "ready" for NODE_STATUS_READY).
// A number the enum does not declare stays a number ("7"). The JSON API
// (rpc/apijson), the CLI, the scheduler's diffs and every error message
// that names a state spell enum values with it.
func EnumWord(e protoreflect.Enum) string {
	if w, ok := EnumValueWord(e.Descriptor(), e.Number()); ok {
		return w
	}
	return strconv.Itoa(int(e.Number()))
}

// EnumValueWord is EnumWord for value n of enum ed; ok is false for a
// number ed does not declare. Of two names for one number (an alias) the
// first declared is the word.
func EnumValueWord(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber) (word string, ok bool) {
	v := ed.Values().ByNumber(n)
	if v == nil {
		return "", false
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(string(v.Name()), prefixOf(ed))), "_", "-"), true
}

var prefixes sync.Map // protoreflect.FullName → string

func prefixOf(ed protoreflect.EnumDescriptor) string {
	if p, ok := prefixes.Load(ed.FullName()); ok {
		return p.(string)
	}
	p := enumPrefix(ed.Values())
	prefixes.Store(ed.FullName(), p)
	return p
}

// enumPrefix is what every value name starts with. By the buf convention the
// zero value is TYPE_UNSPECIFIED, so its name minus UNSPECIFIED is the prefix,
// and a value added later cannot change it; other enums use the longest
// common prefix ending in '_', as long as it leaves every name non-empty.
func enumPrefix(values protoreflect.EnumValueDescriptors) string {
	if values.Len() == 0 {
		return ""
	}
	if zero := values.ByNumber(0); zero != nil {
		if p, ok := strings.CutSuffix(string(zero.Name()), "UNSPECIFIED"); ok && p != "" && allHavePrefix(values, p) {
			return p
		}
	}
	if values.Len() < 2 {
		return ""
	}
	prefix := string(values.Get(0).Name())
	for i := 1; i < values.Len(); i++ {
		name := string(values.Get(i).Name())
		for !strings.HasPrefix(name, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	prefix = prefix[:strings.LastIndexByte(prefix, '_')+1]
	if !allHavePrefix(values, prefix) {
		return ""
	}
	return prefix
}

// allHavePrefix reports whether every value name starts with p and is longer.
func allHavePrefix(values protoreflect.EnumValueDescriptors, p string) bool {
	for i := range values.Len() {
		n := string(values.Get(i).Name())
		if !strings.HasPrefix(n, p) || len(n) == len(p) {
			return false
		}
	}
	return true
}
