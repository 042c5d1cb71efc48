package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// Diff types of a job or group, as JobPlanResponse and GroupDiff carry them.
const (
	DiffAdded   = "added"
	DiffDeleted = "deleted"
	DiffEdited  = "edited"
	DiffNone    = "none"
)

// JobDiff is what changes between two versions of a job.
type JobDiff struct {
	// Type is DiffAdded (no old job), DiffDeleted (no new job), DiffEdited
	// or DiffNone.
	Type string
	// Fields are the job-level changes, one line each:
	// `priority: 50 => 70`, `meta[team]: added "x"`.
	Fields []string
	// Groups are every group of either version, by name; updates are left
	// for PlanJob to fill.
	Groups []*pb.GroupDiff
}

// jobSkip are job fields that change with every registration or are not
// the user's: they are not shown as differences.
var jobSkip = map[string]bool{
	"groups": true, "version": true, "submitted_at": true, "create_index": true,
	"modify_index": true, "job_modify_index": true, "status": true,
	"status_description": true, "source_file": true,
}

// Diff compares two versions of a job. Either may be nil.
func Diff(old, new *pb.Job) *JobDiff {
	d := &JobDiff{}
	switch {
	case old == nil && new == nil:
		d.Type = DiffNone
		return d
	case old == nil:
		d.Type = DiffAdded
	case new == nil:
		d.Type = DiffDeleted
	}
	if old != nil && new != nil {
		diffMessage("", old.ProtoReflect(), new.ProtoReflect(), jobSkip, &d.Fields)
	}
	oldGroups, newGroups := map[string]*pb.TaskGroup{}, map[string]*pb.TaskGroup{}
	var names []string
	for _, g := range old.GetGroups() {
		oldGroups[g.GetName()] = g
		names = append(names, g.GetName())
	}
	for _, g := range new.GetGroups() {
		if oldGroups[g.GetName()] == nil {
			names = append(names, g.GetName())
		}
		newGroups[g.GetName()] = g
	}
	sort.Strings(names)
	edited := len(d.Fields) > 0
	for _, name := range names {
		gd := diffGroup(oldGroups[name], newGroups[name])
		gd.Name = name
		if gd.GetType() != DiffNone {
			edited = true
		}
		d.Groups = append(d.Groups, gd)
	}
	if d.Type == "" {
		d.Type = DiffNone
		if edited {
			d.Type = DiffEdited
		}
	}
	return d
}

func diffGroup(old, new *pb.TaskGroup) *pb.GroupDiff {
	gd := &pb.GroupDiff{Updates: &pb.PlanAnnotation{}}
	switch {
	case old == nil:
		gd.Type = DiffAdded
		return gd
	case new == nil:
		gd.Type = DiffDeleted
		return gd
	}
	diffMessage("", old.ProtoReflect(), new.ProtoReflect(), map[string]bool{"name": true, "tasks": true}, &gd.Fields)
	oldTasks, newTasks := map[string]*pb.Task{}, map[string]*pb.Task{}
	var names []string
	for _, t := range old.GetTasks() {
		oldTasks[t.GetName()] = t
		names = append(names, t.GetName())
	}
	for _, t := range new.GetTasks() {
		if oldTasks[t.GetName()] == nil {
			names = append(names, t.GetName())
		}
		newTasks[t.GetName()] = t
	}
	sort.Strings(names)
	for _, name := range names {
		o, n := oldTasks[name], newTasks[name]
		switch {
		case o == nil:
			gd.Fields = append(gd.Fields, "task "+name+": added")
		case n == nil:
			gd.Fields = append(gd.Fields, "task "+name+": deleted")
		default:
			diffMessage("task "+name+" ", o.ProtoReflect(), n.ProtoReflect(), map[string]bool{"name": true}, &gd.Fields)
		}
	}
	gd.Type = DiffNone
	if len(gd.Fields) > 0 {
		gd.Type = DiffEdited
	}
	return gd
}

// diffMessage appends a line per changed field of a and b (same type),
// with prefix, recursing into messages and maps.
func diffMessage(prefix string, a, b protoreflect.Message, skip map[string]bool, out *[]string) {
	fields := a.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		name := string(fd.Name())
		if skip[name] {
			continue
		}
		path := prefix + name
		va, vb := a.Get(fd), b.Get(fd)
		switch {
		case fd.IsMap():
			diffMap(path, fd, va.Map(), vb.Map(), out)
		case fd.IsList():
			fa, fb := formatList(fd, va.List()), formatList(fd, vb.List())
			if fa != fb {
				*out = append(*out, path+": "+fa+" => "+fb)
			}
		case fd.Message() != nil:
			if !a.Has(fd) && !b.Has(fd) {
				continue
			}
			if isConfigValue(fd.Message()) {
				if fa, fb := formatValue(fd, va), formatValue(fd, vb); fa != fb {
					*out = append(*out, path+": "+fa+" => "+fb)
				}
				continue
			}
			diffMessage(path+".", va.Message(), vb.Message(), nil, out)
		default:
			if fa, fb := formatValue(fd, va), formatValue(fd, vb); fa != fb {
				*out = append(*out, path+": "+fa+" => "+fb)
			}
		}
	}
}

func diffMap(path string, fd protoreflect.FieldDescriptor, a, b protoreflect.Map, out *[]string) {
	keys := map[string]protoreflect.MapKey{}
	a.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool { keys[k.String()] = k; return true })
	b.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool { keys[k.String()] = k; return true })
	vfd := fd.MapValue()
	for _, ks := range sortedKeys(keys) {
		k := keys[ks]
		p := path + "[" + ks + "]"
		switch {
		case !a.Has(k):
			*out = append(*out, p+": added "+formatValue(vfd, b.Get(k)))
		case !b.Has(k):
			*out = append(*out, p+": deleted "+formatValue(vfd, a.Get(k)))
		case vfd.Message() != nil && !isConfigValue(vfd.Message()):
			diffMessage(p+".", a.Get(k).Message(), b.Get(k).Message(), nil, out)
		default:
			if fa, fb := formatValue(vfd, a.Get(k)), formatValue(vfd, b.Get(k)); fa != fb {
				*out = append(*out, p+": "+fa+" => "+fb)
			}
		}
	}
}

func isConfigValue(md protoreflect.MessageDescriptor) bool {
	return md.FullName() == "berth.driver.v1.ConfigValue"
}

// formatValue renders one value for a diff line: strings quoted, enums as
// their short lowercase word, messages as {field=value ...}.
func formatValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return strconv.Quote(v.String())
	case protoreflect.EnumKind:
		if w, ok := pb.EnumValueWord(fd.Enum(), v.Enum()); ok {
			return w
		}
		return strconv.Itoa(int(v.Enum()))
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if cv, ok := v.Message().Interface().(*driverpb.ConfigValue); ok {
			return formatConfigValue(cv)
		}
		return formatMessage(v.Message())
	case protoreflect.BytesKind:
		return fmt.Sprintf("%x", v.Bytes())
	}
	return v.String()
}

// formatConfigValue renders a task config value as the job file writes it:
// "text", 3, true, "30s", ["a", "b"], {k = "v"}.
func formatConfigValue(v *driverpb.ConfigValue) string {
	switch k := v.GetKind().(type) {
	case *driverpb.ConfigValue_StringValue:
		return strconv.Quote(k.StringValue)
	case *driverpb.ConfigValue_IntValue:
		return strconv.FormatInt(k.IntValue, 10)
	case *driverpb.ConfigValue_BoolValue:
		return strconv.FormatBool(k.BoolValue)
	case *driverpb.ConfigValue_DurationNanos:
		return strconv.Quote(time.Duration(k.DurationNanos).String())
	case *driverpb.ConfigValue_ListValue:
		parts := make([]string, len(k.ListValue.GetValues()))
		for i, s := range k.ListValue.GetValues() {
			parts[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *driverpb.ConfigValue_MapValue:
		m := k.MapValue.GetValues()
		parts := make([]string, 0, len(m))
		for _, key := range slices.Sorted(maps.Keys(m)) {
			name := key
			if !hclsyntax.ValidIdentifier(key) {
				name = strconv.Quote(key)
			}
			parts = append(parts, name+" = "+strconv.Quote(m[key]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return "null"
}

func formatMessage(m protoreflect.Message) string {
	var parts []string
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		var s string
		switch {
		case fd.IsList():
			s = formatList(fd, v.List())
		case fd.IsMap():
			var kv []string
			keys := map[string]protoreflect.MapKey{}
			v.Map().Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool { keys[k.String()] = k; return true })
			for _, ks := range sortedKeys(keys) {
				kv = append(kv, ks+":"+formatValue(fd.MapValue(), v.Map().Get(keys[ks])))
			}
			s = "{" + strings.Join(kv, " ") + "}"
		default:
			s = formatValue(fd, v)
		}
		parts = append(parts, string(fd.Name())+"="+s)
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func formatList(fd protoreflect.FieldDescriptor, l protoreflect.List) string {
	parts := make([]string, l.Len())
	for i := range parts {
		parts[i] = formatValue(fd, l.Get(i))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
