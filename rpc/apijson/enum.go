package apijson

import (
	"sync"

	"berth.dev/berth/rpc/pb"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// enumTable is the word of each value of one enum type, both ways, as
// rules.EnumValueWord spells it; the table makes decoding a word fast.
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
	t := &enumTable{words: map[protoreflect.EnumNumber]string{}, numbers: map[string]protoreflect.EnumNumber{}}
	for i := range values.Len() {
		v := values.Get(i)
		if _, dup := t.words[v.Number()]; dup {
			continue // an alias: the first name of a number is its word
		}
		w, _ := pb.EnumValueWord(ed, v.Number())
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
