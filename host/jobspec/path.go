package jobspec

import (
	"fmt"
	"slices"
	"strings"

	"berth.dev/berth/internal/hclsrc"
)

// path names a field the way messages show it: the object (`group "api"
// task "web"`), then the field inside it (`resources.cpu`). Its String is
// both Error.Path and the key under which the parser records where the field
// was written, so validation, which sees only the *pb.Job, finds the position
// of whatever it complains about.
type path struct {
	obj   []string // `group "api"`, `task "web"`, `volume "data"`
	field []string // "resources", "cpu"; an index is part of its segment: "constraint[0]"
}

func (p path) String() string {
	o, f := strings.Join(p.obj, " "), strings.Join(p.field, ".")
	switch {
	case o == "":
		return f
	case f == "":
		return o
	}
	return o + ": " + f
}

// in is the object named name of the given kind inside p's object.
func (p path) in(kind, name string) path {
	return path{obj: append(slices.Clip(p.obj), fmt.Sprintf("%s %q", kind, name))}
}

// f is the field name inside p.
func (p path) f(name string) path {
	return path{obj: p.obj, field: append(slices.Clip(p.field), name)}
}

// at is entry i of the repeated field name inside p.
func (p path) at(name string, i int) path {
	return p.f(fmt.Sprintf("%s[%d]", name, i))
}

// index is entry i of the list p.
func (p path) index(i int) path {
	f := slices.Clone(p.field)
	if len(f) == 0 {
		f = []string{""}
	}
	f[len(f)-1] += fmt.Sprintf("[%d]", i)
	return path{obj: p.obj, field: f}
}

// parent is what contains p: the enclosing field, then the object, then the
// object's own container. ok is false at the job itself.
func (p path) parent() (path, bool) {
	switch {
	case len(p.field) > 0:
		return path{obj: p.obj, field: p.field[:len(p.field)-1]}, true
	case len(p.obj) > 0:
		return path{obj: p.obj[:len(p.obj)-1]}, true
	}
	return path{}, false
}

// positions maps the String of a path to where the file wrote it.
type positions map[string]Pos

// of returns where p, or the nearest thing containing it, was written: a
// default filled in for an absent field is blamed on its block.
func (ps positions) of(p path) Pos {
	for {
		if pos, ok := ps[p.String()]; ok {
			return pos
		}
		var ok bool
		if p, ok = p.parent(); !ok {
			return ps[""]
		}
	}
}

// Field is f, for hclsrc.
func (p path) Field(name string) hclsrc.Path { return p.f(name) }

// Index is index, for hclsrc.
func (p path) Index(i int) hclsrc.Path { return p.index(i) }
