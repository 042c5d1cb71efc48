package apijson

import (
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// enumTable is the word of each value of one enum type, both ways.
type enumTable struct {
	words    map[protoreflect.EnumNumber]string
	numbers  map[string]protoreflect.EnumNumber
	ordered  []string // words in declaration order
	nonZeros []string // words of the values other than 0
}

var enumTables sync.Map // protoreflect.FullName → *enumTable

func tableOf(ed protoreflect.EnumDescriptor) *enumTable {
	if t, ok := enumTables.Load(ed.FullName()); ok {
		return t.(*enumTable)
	}
	values := ed.Values()
	prefix := enumPrefix(values)
	t := &enumTable{words: map[protoreflect.EnumNumber]string{}, numbers: map[string]protoreflect.EnumNumber{}}
	for i := range values.Len() {
		v := values.Get(i)
		w := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(string(v.Name()), prefix)), "_", "-")
		if _, dup := t.words[v.Number()]; dup {
			continue // an alias: the first name of a number is its word
		}
		t.words[v.Number()] = w
		t.numbers[w] = v.Number()
		t.ordered = append(t.ordered, w)
		if v.Number() != 0 {
			t.nonZeros = append(t.nonZeros, w)
		}
	}
	enumTables.Store(ed.FullName(), t)
	return t
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

// EnumWord returns the JSON word of value n of enum ed ("ready" for
// NODE_STATUS_READY); ok is false for a number ed does not declare.
func EnumWord(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber) (word string, ok bool) {
	word, ok = tableOf(ed).words[n]
	return word, ok
}

// EnumNumber returns the value of enum ed whose JSON word is word.
func EnumNumber(ed protoreflect.EnumDescriptor, word string) (n protoreflect.EnumNumber, ok bool) {
	n, ok = tableOf(ed).numbers[word]
	return n, ok
}

// EnumWords lists the words of enum ed in declaration order; without zero
// it leaves out the zero value (what a filter parameter may name).
func EnumWords(ed protoreflect.EnumDescriptor, withZero bool) []string {
	t := tableOf(ed)
	if withZero {
		return append([]string(nil), t.ordered...)
	}
	return append([]string(nil), t.nonZeros...)
}
