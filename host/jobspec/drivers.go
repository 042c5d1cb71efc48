package jobspec

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"berth.dev/berth/internal/hclsrc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// ValidateDrivers checks every task's driver and config block against
// schemas, the task config schemas of the drivers that can run tasks, by
// driver name: a driver not in schemas, a config key the schema does not
// have, a required key left out and a value of the wrong type are errors
// (*Errors, naming the task and the key). The server builds schemas from
// its nodes' DriverInfo.task_schema; Parse does the same check, with
// positions, given WithDrivers.
func ValidateDrivers(job *pb.Job, schemas map[string]*driverpb.Schema) error {
	v := &validator{errs: &Errors{}}
	v.drivers(job, schemas)
	return v.errs.err()
}

func (v *validator) drivers(job *pb.Job, schemas map[string]*driverpb.Schema) {
	names := slices.Sorted(maps.Keys(schemas))
	for _, g := range job.GetGroups() {
		for _, t := range g.GetTasks() {
			if t.GetDriver() == "" {
				continue // ValidateJob reports it
			}
			p := path{}.in("group", g.GetName()).in("task", t.GetName())
			schema, ok := schemas[t.GetDriver()]
			if !ok {
				v.addKind(p.f("driver"), ErrUnknownDriver, "no driver %q in the cluster%s", t.GetDriver(), driversHint(t.GetDriver(), names))
				continue
			}
			v.driverConfig(p.f("config"), t.GetDriver(), schema, t.GetConfig())
		}
	}
}

func driversHint(name string, known []string) string {
	switch {
	case len(known) == 0:
		return " (it has none)"
	case hclsrc.Suggest(name, known) != "":
		return fmt.Sprintf("; did you mean %q?", hclsrc.Suggest(name, known))
	}
	return " (drivers: " + strings.Join(known, ", ") + ")"
}

// driverConfig checks a task's config against its driver's schema. Unknown
// keys are found here, with a suggestion; the sdk's own validation, which
// the driver runs again when it starts the task, judges the rest, so the
// two cannot disagree about types (a duration field takes "30s").
func (v *validator) driverConfig(p path, driver string, schema *driverpb.Schema, config map[string]*driverpb.ConfigValue) {
	fields := map[string]bool{}
	for _, f := range schema.GetFields() {
		fields[f.GetName()] = true
	}
	valid := slices.Sorted(maps.Keys(fields))
	known := map[string]*driverpb.ConfigValue{}
	for _, key := range sortedKeys(config) {
		if fields[key] {
			known[key] = config[key]
			continue
		}
		hint := ""
		if s := hclsrc.Suggest(key, valid); s != "" {
			hint = fmt.Sprintf("; did you mean %q?", s)
		}
		list := "it takes no keys"
		if len(valid) > 0 {
			list = "valid keys: " + strings.Join(valid, ", ")
		}
		v.addKind(p.f(key), ErrUnknownKey, "driver %q has no config key %q%s (%s)", driver, key, hint, list)
	}
	spec := sdk.ConfigSpec{Plugin: driver, Scope: sdk.ScopeTaskConfig, Schema: schema}
	_, err := spec.Validate(known)
	if err == nil {
		return
	}
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	for _, e := range list {
		var ce *sdk.ConfigError
		if !errors.As(e, &ce) {
			v.add(p, "%v", e)
			continue
		}
		kind := ErrInvalidJob
		if _, given := config[ce.Key]; given {
			kind = ErrWrongType
		}
		v.addKind(p.f(ce.Key), kind, "%s", ce.Problem)
	}
}
