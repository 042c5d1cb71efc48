package apijson

import (
	"strconv"
	"strings"
)

// path locates the value being encoded or decoded. It is a chain of small
// values rather than a string, and becomes a string only when an error
// names it, so a walk over thousands of nodes builds no paths.
type path struct {
	parent *path
	name   string // a field name, or a map key for pathKey
	index  int    // a list index for pathIndex
	kind   pathKind
}

type pathKind uint8

const (
	pathField pathKind = iota
	pathIndex
	pathKey
)

// String renders the path as Error.Path documents it: nodes[3].status,
// drivers["raw_exec"].healthy; nil is the document itself, "".
func (p *path) String() string {
	var elems []*path
	for q := p; q != nil; q = q.parent {
		elems = append(elems, q)
	}
	var b strings.Builder
	for i := len(elems) - 1; i >= 0; i-- {
		switch e := elems[i]; e.kind {
		case pathField:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(e.name)
		case pathIndex:
			b.WriteString("[" + strconv.Itoa(e.index) + "]")
		case pathKey:
			b.WriteString("[" + strconv.Quote(e.name) + "]")
		}
	}
	return b.String()
}
