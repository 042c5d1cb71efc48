package sdk

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk/driverpb"
)

// ConfigSpec is a schema together with what it configures, so that every
// error names the plugin, the config and the key. Berth validates configs
// with it before sending them, and drivers validate what they receive with
// the same code.
type ConfigSpec struct {
	// Plugin is the driver's name.
	Plugin string
	Scope  ConfigScope
	Schema *driverpb.Schema
}

// Validate checks in against the schema: unknown keys, missing required
// keys and values of the wrong type are errors (all of them, joined, one
// *ConfigError per key, sorted by key). Duration fields also accept Go
// duration strings ("90s"). Absent keys take their default.
func (s ConfigSpec) Validate(in ConfigMap) (*Values, error) {
	fields := map[string]*driverpb.Field{}
	for _, f := range s.Schema.GetFields() {
		fields[f.GetName()] = f
	}
	out := make(map[string]*driverpb.ConfigValue, len(fields))
	var errs []*ConfigError
	problem := func(key, format string, args ...any) {
		errs = append(errs, &ConfigError{Plugin: s.Plugin, Scope: s.Scope, Key: key, Problem: fmt.Sprintf(format, args...)})
	}
	for _, key := range slices.Sorted(maps.Keys(in)) {
		f, ok := fields[key]
		if !ok {
			problem(key, "unknown key (%s)", validKeys(fields))
			continue
		}
		v, err := coerce(f.GetType(), in[key])
		if err != nil {
			problem(key, "%v", err)
			continue
		}
		out[key] = v
	}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		f := fields[name]
		if _, ok := out[name]; ok {
			continue
		}
		if _, given := in[name]; given {
			continue // already reported as a bad value
		}
		switch {
		case f.GetRequired():
			problem(name, "required key is missing")
		case f.GetDefault() != nil:
			out[name] = proto.Clone(f.GetDefault()).(*driverpb.ConfigValue)
		}
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *ConfigError) int { return strings.Compare(a.Key, b.Key) })
		joined := make([]error, len(errs))
		for i, e := range errs {
			joined[i] = e
		}
		return nil, errors.Join(joined...)
	}
	return &Values{m: out}, nil
}

func validKeys(fields map[string]*driverpb.Field) string {
	if len(fields) == 0 {
		return "this config takes no keys"
	}
	return "valid keys: " + strings.Join(slices.Sorted(maps.Keys(fields)), ", ")
}

// coerce returns v as a value of type t, or says why it is not one.
func coerce(t driverpb.FieldType, v *driverpb.ConfigValue) (*driverpb.ConfigValue, error) {
	got := valueKind(v)
	if got == typeWord(t) {
		return v, nil
	}
	if t == TypeDuration {
		if s, ok := v.GetKind().(*driverpb.ConfigValue_StringValue); ok {
			d, err := time.ParseDuration(s.StringValue)
			if err != nil {
				return nil, fmt.Errorf("invalid duration %q (use a number with a unit, e.g. \"30s\", \"5m\")", s.StringValue)
			}
			return DurationValue(d), nil
		}
	}
	return nil, fmt.Errorf("expected %s, got %s", article(typeWord(t)), article(got))
}

// Values is a validated config: every key present has its declared type,
// defaults are filled in. The getters return the zero value for a key that
// is absent (optional without default); Has tells the two apart.
type Values struct {
	m map[string]*driverpb.ConfigValue
}

// Has reports whether key has a value (given or defaulted).
func (v *Values) Has(key string) bool {
	_, ok := v.m[key]
	return ok
}

// String returns a string field.
func (v *Values) String(key string) string { return v.m[key].GetStringValue() }

// Int returns an int field.
func (v *Values) Int(key string) int64 { return v.m[key].GetIntValue() }

// Bool returns a bool field.
func (v *Values) Bool(key string) bool { return v.m[key].GetBoolValue() }

// Duration returns a duration field.
func (v *Values) Duration(key string) time.Duration {
	return time.Duration(v.m[key].GetDurationNanos())
}

// List returns a copy of a list(string) field.
func (v *Values) List(key string) []string {
	return slices.Clone(v.m[key].GetListValue().GetValues())
}

// Map returns a copy of a map(string) field.
func (v *Values) Map(key string) map[string]string {
	return maps.Clone(v.m[key].GetMapValue().GetValues())
}

// ConfigMap returns the normalized config (defaults filled in, durations as
// durations), e.g. to store in a handle.
func (v *Values) ConfigMap() ConfigMap {
	out := make(ConfigMap, len(v.m))
	for k, val := range v.m {
		out[k] = proto.Clone(val).(*driverpb.ConfigValue)
	}
	return out
}
