package sdk

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"berth.dev/berth/sdk/driverpb"
)

// Field types, shorter to write in a schema literal.
const (
	TypeString   = driverpb.FieldType_FIELD_TYPE_STRING
	TypeInt      = driverpb.FieldType_FIELD_TYPE_INT
	TypeBool     = driverpb.FieldType_FIELD_TYPE_BOOL
	TypeDuration = driverpb.FieldType_FIELD_TYPE_DURATION
	TypeList     = driverpb.FieldType_FIELD_TYPE_LIST
	TypeMap      = driverpb.FieldType_FIELD_TYPE_MAP
)

// ConfigMap is a config as it travels: key to value. Build one with the
// value constructors: ConfigMap{"command": StringValue("/bin/sh")}.
type ConfigMap = map[string]*driverpb.ConfigValue

// StringValue returns a string config value.
func StringValue(s string) *driverpb.ConfigValue {
	return &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_StringValue{StringValue: s}}
}

// IntValue returns an int config value.
func IntValue(i int64) *driverpb.ConfigValue {
	return &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_IntValue{IntValue: i}}
}

// BoolValue returns a bool config value.
func BoolValue(b bool) *driverpb.ConfigValue {
	return &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_BoolValue{BoolValue: b}}
}

// DurationValue returns a duration config value.
func DurationValue(d time.Duration) *driverpb.ConfigValue {
	return &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_DurationNanos{DurationNanos: int64(d)}}
}

// ListValue returns a list(string) config value.
func ListValue(items ...string) *driverpb.ConfigValue {
	return &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_ListValue{ListValue: &driverpb.StringList{Values: items}}}
}

// MapValue returns a map(string) config value.
func MapValue(m map[string]string) *driverpb.ConfigValue {
	return &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_MapValue{MapValue: &driverpb.StringMap{Values: m}}}
}

// fieldNameRE is compiled at its first use, not at every start of every
// process that links the sdk (berth's CLI included).
var fieldNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9_]*$`) })

// CheckSchema reports mistakes in a schema itself: bad or duplicate names,
// unknown types, defaults of the wrong type, required fields with a default.
// ServeDriver checks the driver's schemas with it at start, and
// DriverClient checks what a plugin sends.
func CheckSchema(s *driverpb.Schema) error {
	var errs []error
	seen := map[string]bool{}
	for i, f := range s.GetFields() {
		name := f.GetName()
		switch {
		case !fieldNameRE().MatchString(name):
			errs = append(errs, fmt.Errorf("schema field %d: name %q must match %s", i, name, fieldNameRE()))
			continue
		case seen[name]:
			errs = append(errs, fmt.Errorf("schema field %q: declared twice", name))
			continue
		}
		seen[name] = true
		if _, ok := driverpb.FieldType_name[int32(f.GetType())]; !ok || f.GetType() == driverpb.FieldType_FIELD_TYPE_UNSPECIFIED {
			errs = append(errs, fmt.Errorf("schema field %q: unknown type %d", name, f.GetType()))
			continue
		}
		if f.GetDefault() == nil {
			continue
		}
		if f.GetRequired() {
			errs = append(errs, fmt.Errorf("schema field %q: a required field cannot have a default", name))
		}
		if got := valueKind(f.GetDefault()); got != typeWord(f.GetType()) {
			errs = append(errs, fmt.Errorf("schema field %q: default is %s, field is %s", name, article(got), article(typeWord(f.GetType()))))
		}
	}
	return errors.Join(errs...)
}

// typeWord names a field type for messages.
func typeWord(t driverpb.FieldType) string {
	switch t {
	case TypeString:
		return "string"
	case TypeInt:
		return "int"
	case TypeBool:
		return "bool"
	case TypeDuration:
		return "duration"
	case TypeList:
		return "list(string)"
	case TypeMap:
		return "map(string)"
	}
	return "unknown type"
}

// valueKind names the kind of a value, in typeWord's words.
func valueKind(v *driverpb.ConfigValue) string {
	switch v.GetKind().(type) {
	case *driverpb.ConfigValue_StringValue:
		return "string"
	case *driverpb.ConfigValue_IntValue:
		return "int"
	case *driverpb.ConfigValue_BoolValue:
		return "bool"
	case *driverpb.ConfigValue_DurationNanos:
		return "duration"
	case *driverpb.ConfigValue_ListValue:
		return "list(string)"
	case *driverpb.ConfigValue_MapValue:
		return "map(string)"
	}
	return "empty value"
}

func article(word string) string {
	switch word[0] {
	case 'a', 'e', 'i', 'o', 'u':
		return "an " + word
	}
	return "a " + word
}
