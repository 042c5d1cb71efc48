package taskenv

import (
	"maps"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// Node is what a task may learn of its node.
type Node struct {
	ID   string
	Name string
	// Attributes are the node's attributes, as NodeAttributes returns them.
	Attributes map[string]string
	// Meta is the operator's node metadata.
	Meta map[string]string
}

// NodeFrom returns the Node of a registered node.
func NodeFrom(n *pb.Node) Node {
	return Node{ID: n.GetId(), Name: n.GetName(), Attributes: NodeAttributes(n), Meta: n.GetMeta()}
}

// NodeAttributes returns the attributes ${attr.<key>} reads: the
// fingerprint's own attributes (kernel.version, ...) plus kernel.name,
// cpu.arch, cpu.numcores, cpu.totalcompute (MHz, when known),
// memory.totalbytes, unique.hostname, berth.version and, per detected
// driver, driver.<name> ("1" when healthy, "0" when not).
func NodeAttributes(n *pb.Node) map[string]string {
	fp := n.GetFingerprint()
	out := maps.Clone(fp.GetAttributes())
	if out == nil {
		out = map[string]string{}
	}
	set := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	set("kernel.name", fp.GetOs())
	set("cpu.arch", fp.GetArch())
	if fp.GetCpuCores() > 0 {
		set("cpu.numcores", strconv.Itoa(int(fp.GetCpuCores())))
	}
	if fp.GetCpuTotalMhz() > 0 {
		set("cpu.totalcompute", strconv.FormatInt(fp.GetCpuTotalMhz(), 10))
	}
	if fp.GetMemoryBytes() > 0 {
		set("memory.totalbytes", strconv.FormatUint(fp.GetMemoryBytes(), 10))
	}
	set("unique.hostname", fp.GetHostname())
	set("berth.version", fp.GetBerthVersion())
	for name, d := range n.GetDrivers() {
		if !d.GetDetected() {
			continue
		}
		v := "0"
		if d.GetHealthy() {
			v = "1"
		}
		out["driver."+name] = v
	}
	return out
}

// Input is everything a task's environment is built from.
type Input struct {
	Node  Node
	Alloc *pb.Allocation
	Job   *pb.Job
	Group *pb.TaskGroup
	Task  *pb.Task
	// AllocDir, TaskDir and SecretsDir are the host paths of the shared
	// alloc dir, the task's local dir and its secrets dir.
	AllocDir, TaskDir, SecretsDir string
}

// Env is a task's environment and the variables interpolation reads. It is
// immutable: the With methods return a new Env.
type Env struct {
	env  map[string]string
	vars map[string]string
}

// Build returns the environment of in.Task.
func Build(in Input) *Env {
	e := &Env{env: map[string]string{}, vars: map[string]string{}}
	e.vars["node.unique.id"] = in.Node.ID
	e.vars["node.unique.name"] = in.Node.Name
	for k, v := range in.Node.Attributes {
		e.vars["attr."+k] = v
	}
	for k, v := range in.Node.Meta {
		e.vars["meta."+k] = v
	}

	res := in.Task.GetResources()
	for k, v := range map[string]string{
		"BERTH_ALLOC_ID":     in.Alloc.GetId(),
		"BERTH_ALLOC_NAME":   in.Alloc.GetName(),
		"BERTH_ALLOC_INDEX":  strconv.Itoa(int(in.Alloc.GetIndex())),
		"BERTH_ALLOC_DIR":    in.AllocDir,
		"BERTH_TASK_DIR":     in.TaskDir,
		"BERTH_SECRETS_DIR":  in.SecretsDir,
		"BERTH_TASK_NAME":    in.Task.GetName(),
		"BERTH_GROUP_NAME":   in.Group.GetName(),
		"BERTH_JOB_ID":       in.Job.GetId(),
		"BERTH_JOB_NAME":     jobName(in.Job),
		"BERTH_NODE_ID":      in.Node.ID,
		"BERTH_NODE_NAME":    in.Node.Name,
		"BERTH_CPU_LIMIT":    strconv.FormatInt(res.GetCpuMhz(), 10),
		"BERTH_MEMORY_LIMIT": strconv.FormatInt(res.GetMemoryMb(), 10),
	} {
		e.env[k] = v
	}
	meta := map[string]string{}
	maps.Copy(meta, in.Job.GetMeta())
	maps.Copy(meta, in.Group.GetMeta())
	maps.Copy(meta, in.Task.GetMeta())
	for _, k := range sortedKeys(meta) {
		e.addIfAbsent("BERTH_META_"+k, meta[k])
		e.addIfAbsent("BERTH_META_"+envKey(k), meta[k])
	}
	// The task's env is interpolated against what berth set, not against
	// itself: its values do not depend on the order of a map.
	base := e.clone()
	for _, k := range sortedKeys(in.Task.GetEnv()) {
		e.addIfAbsent(k, base.Replace(in.Task.GetEnv()[k]))
	}
	return e
}

// jobName is the job's name, its ID when it has none.
func jobName(j *pb.Job) string {
	if j.GetName() != "" {
		return j.GetName()
	}
	return j.GetId()
}

// envKey upper-cases k and turns the characters a shell variable name
// cannot hold into '_'.
func envKey(k string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			return r
		}
		return '_'
	}, k)
}

func (e *Env) addIfAbsent(k, v string) {
	if _, ok := e.env[k]; !ok {
		e.env[k] = v
	}
}

func (e *Env) clone() *Env { return &Env{env: maps.Clone(e.env), vars: maps.Clone(e.vars)} }

// WithEnv returns e with extra variables in the environment; a variable of
// extra replaces one of e (a hook's word is the last).
func (e *Env) WithEnv(extra map[string]string) *Env {
	out := e.clone()
	maps.Copy(out.env, extra)
	return out
}

// WithVars returns e with extra interpolation variables (volume.<name>, ...).
func (e *Env) WithVars(vars map[string]string) *Env {
	out := e.clone()
	maps.Copy(out.vars, vars)
	return out
}

// FromMaps returns the Env of an environment and interpolation variables
// (Map and Vars of another Env, with what hooks added).
func FromMaps(env, vars map[string]string) *Env {
	return &Env{env: maps.Clone(env), vars: maps.Clone(vars)}
}

// Vars returns a copy of the interpolation variables other than the
// environment's (node.unique.id, attr.<key>, meta.<key>, hook variables).
func (e *Env) Vars() map[string]string { return maps.Clone(e.vars) }

// Map returns a copy of the environment.
func (e *Env) Map() map[string]string { return maps.Clone(e.env) }

// Get returns one variable of the environment.
func (e *Env) Get(k string) (string, bool) {
	v, ok := e.env[k]
	return v, ok
}

// lookup resolves an interpolation name.
func (e *Env) lookup(name string) (string, bool) {
	if v, ok := e.vars[name]; ok {
		return v, true
	}
	if k, ok := strings.CutPrefix(name, "env."); ok {
		v, ok := e.env[k]
		return v, ok
	}
	v, ok := e.env[name]
	return v, ok
}

// Replace interpolates every ${name} of s it knows; an unknown one stays
// as written (see the package doc).
func (e *Env) Replace(s string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := strings.IndexByte(s[i+2:], '}')
		if j < 0 {
			b.WriteString(s)
			return b.String()
		}
		name := s[i+2 : i+2+j]
		b.WriteString(s[:i])
		if v, ok := e.lookup(name); ok {
			b.WriteString(v)
		} else {
			b.WriteString(s[i : i+3+j])
		}
		s = s[i+3+j:]
	}
}

// ReplaceConfig returns a copy of a driver config with every string, list
// element and map value interpolated.
func (e *Env) ReplaceConfig(cfg map[string]*driverpb.ConfigValue) map[string]*driverpb.ConfigValue {
	out := make(map[string]*driverpb.ConfigValue, len(cfg))
	for k, v := range cfg {
		out[k] = e.replaceValue(v)
	}
	return out
}

func (e *Env) replaceValue(v *driverpb.ConfigValue) *driverpb.ConfigValue {
	switch k := v.GetKind().(type) {
	case *driverpb.ConfigValue_StringValue:
		return &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_StringValue{StringValue: e.Replace(k.StringValue)}}
	case *driverpb.ConfigValue_ListValue:
		vals := make([]string, len(k.ListValue.GetValues()))
		for i, s := range k.ListValue.GetValues() {
			vals[i] = e.Replace(s)
		}
		return &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_ListValue{ListValue: &driverpb.StringList{Values: vals}}}
	case *driverpb.ConfigValue_MapValue:
		m := make(map[string]string, len(k.MapValue.GetValues()))
		for mk, s := range k.MapValue.GetValues() {
			m[mk] = e.Replace(s)
		}
		return &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_MapValue{MapValue: &driverpb.StringMap{Values: m}}}
	}
	if v == nil {
		return nil
	}
	return proto.Clone(v).(*driverpb.ConfigValue)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// DefaultPath is the PATH a task gets when neither its env nor a hook sets
// one: drivers add nothing from the agent's environment, and a task whose
// command is a bare name must find it.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// WithDefaults returns e with PATH set to DefaultPath when it has none
// (on unix-like systems).
func (e *Env) WithDefaults() *Env {
	if _, ok := e.env["PATH"]; ok || runtime.GOOS == "windows" {
		return e
	}
	return e.WithEnv(map[string]string{"PATH": DefaultPath})
}
