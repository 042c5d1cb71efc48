package agent

import (
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"berth.dev/berth/internal/hclsrc"
)

// One table describes every configuration key, so that decoding a file,
// merging two configs and validating one cannot drift apart: adding a key is
// adding a row.

// attrDef is one configuration argument.
type attrDef struct {
	key string // the HCL key inside its block
	// decode reads the attribute into c, reporting problems to d; it
	// reports whether the file set a value (null counts as unset).
	decode func(d *decoder, path string, a *hcl.Attribute, c *Config) bool
	// validate checks (and for address lists normalizes) the field in c.
	validate func(c *Config, path string, pos SourcePos, errs *ConfigErrors)
	copy     func(dst, src *Config)
	isZero   func(c *Config) bool
}

// blockDef is an unlabelled block of arguments, such as server { ... }.
type blockDef struct {
	key   string
	attrs []attrDef
}

// topAttrs are the arguments at the top level of a file.
var topAttrs = []attrDef{
	scalar("name", func(c *Config) *string { return &c.Name }, toString, nil),
	scalar("data_dir", func(c *Config) *string { return &c.DataDir }, toString, checkAbsPath),
	scalar("bind_addr", func(c *Config) *string { return &c.BindAddr }, toString, checkIP),
	scalar("plugin_dir", func(c *Config) *string { return &c.PluginDir }, toString, checkAbsPath),
	scalar("log_level", func(c *Config) *string { return &c.LogLevel }, toString, checkLogLevel),
	scalar("log_json", func(c *Config) *bool { return &c.LogJSON }, toBool, nil),
	regionAttr,
}

// configBlocks are the unlabelled blocks at the top level of a file.
var configBlocks = []blockDef{
	{key: "ports", attrs: []attrDef{
		scalar("http", func(c *Config) *int { return &c.Ports.HTTP }, toInt, checkPort),
		scalar("rpc", func(c *Config) *int { return &c.Ports.RPC }, toInt, checkPort),
		scalar("raft", func(c *Config) *int { return &c.Ports.Raft }, toInt, checkPort),
	}},
	{key: "server", attrs: []attrDef{
		scalar("enabled", func(c *Config) *bool { return &c.Server.Enabled }, toBool, nil),
		scalar("bootstrap_expect", func(c *Config) *int { return &c.Server.BootstrapExpect }, toInt, checkNonNegative),
		stringList("retry_join", func(c *Config) *[]string { return &c.Server.RetryJoin }, NormalizeServerAddr),
		scalar("retry_interval", func(c *Config) *time.Duration { return &c.Server.RetryInterval }, toDuration, checkPositive),
		scalar("heartbeat_ttl", func(c *Config) *time.Duration { return &c.Server.HeartbeatTTL }, toDuration, checkPositive),
		scalar("heartbeat_grace", func(c *Config) *time.Duration { return &c.Server.HeartbeatGrace }, toDuration, checkNonNegative),
		scalar("leave_on_terminate", func(c *Config) *bool { return &c.Server.LeaveOnTerminate }, toBool, nil),
		scalar("raft_snapshot_threshold", func(c *Config) *uint64 { return &c.Server.RaftSnapshotThreshold }, toUint64, checkAtLeastOne),
		scalar("raft_snapshot_interval", func(c *Config) *time.Duration { return &c.Server.RaftSnapshotInterval }, toDuration, checkSnapshotInterval),
		scalar("raft_trailing_logs", func(c *Config) *uint64 { return &c.Server.RaftTrailingLogs }, toUint64, nil),
		scalar("force_detach_after", func(c *Config) *time.Duration { return &c.Server.ForceDetachAfter }, toDuration, checkPositive),
		scalar("volume_reconcile_interval", func(c *Config) *time.Duration { return &c.Server.VolumeReconcileInterval }, toDuration, checkPositive),
		scalar("gc_percent", func(c *Config) *int { return &c.Server.GCPercent }, toInt, checkGCPercent),
		scalar("job_max_count", func(c *Config) *int64 { return &c.Server.JobLimits.MaxGroupCount }, toInt64, checkJobLimit[int64]),
		scalar("job_max_groups", func(c *Config) *int { return &c.Server.JobLimits.MaxGroups }, toInt, checkJobLimit[int]),
		scalar("job_max_tasks", func(c *Config) *int { return &c.Server.JobLimits.MaxTasks }, toInt, checkJobLimit[int]),
		scalar("job_max_allocs", func(c *Config) *int64 { return &c.Server.JobLimits.MaxAllocs }, toInt64, checkJobLimit[int64]),
		scalar("job_max_size", func(c *Config) *int { return &c.Server.JobLimits.MaxBytes }, toByteSize, checkJobMaxSize),
		scalar("snapshot_restore_max_size", func(c *Config) *int64 { return &c.Server.SnapshotRestoreMaxBytes }, toByteSize64, checkJobLimit[int64]),
		scalar("node_identity_enforcement", func(c *Config) *string { return &c.Server.NodeIdentityEnforcement }, toString, checkNodeIdentityEnforcement),
		scalar("max_heartbeats_per_second", func(c *Config) *int { return &c.Server.MaxHeartbeatsPerSecond }, toInt, checkNonNegative),
		scalar("raft_commit_timeout", func(c *Config) *time.Duration { return &c.Server.RaftCommitTimeout }, toDuration, checkRaftCommitTimeout),
	}},
	{key: "client", attrs: []attrDef{
		scalar("enabled", func(c *Config) *bool { return &c.Client.Enabled }, toBool, nil),
		stringList("servers", func(c *Config) *[]string { return &c.Client.Servers }, NormalizeServerAddr),
		scalar("node_name", func(c *Config) *string { return &c.Client.NodeName }, toString, nil),
		scalar("reserved_cpu_mhz", func(c *Config) *int { return &c.Client.ReservedCPUMHz }, toInt, checkNonNegative),
		scalar("reserved_memory_mb", func(c *Config) *int { return &c.Client.ReservedMemoryMB }, toInt, checkNonNegative),
		scalar("host_volumes_dir", func(c *Config) *string { return &c.Client.HostVolumesDir }, toString, checkAbsPath),
		scalar("host_volume_plugin_dir", func(c *Config) *string { return &c.Client.HostVolumePluginDir }, toString, checkAbsPath),
	}},
	tlsConfigBlock,
	{key: "acl", attrs: aclAttrs},
	limitsBlock,
}

// eachAttr calls fn for every argument in the table with its field path.
func eachAttr(fn func(path string, def attrDef)) {
	for _, def := range topAttrs {
		fn(def.key, def)
	}
	for _, b := range configBlocks {
		for _, def := range b.attrs {
			fn(b.key+"."+def.key, def)
		}
	}
}

// scalar describes a single-valued argument of type T, read from HCL by
// conv and checked by check (nil: anything conv accepts is fine).
func scalar[T comparable](key string, get func(*Config) *T, conv func(cty.Value) (T, error), check func(T) error) attrDef {
	return attrDef{
		key: key,
		decode: func(d *decoder, path string, a *hcl.Attribute, c *Config) bool {
			// null leaves the key unset
			t, ok := hclsrc.Read(&d.Decoder, a, hclsrc.FieldPath(path), func(v cty.Value) (T, error) {
				t, err := conv(v)
				if err == nil && check != nil {
					err = check(t)
				}
				return t, err
			})
			if ok {
				*get(c) = t
			}
			return ok
		},
		validate: func(c *Config, path string, pos SourcePos, errs *ConfigErrors) {
			if check == nil {
				return
			}
			if err := check(*get(c)); err != nil {
				errs.AddValue(pos, path, configKinds, err)
			}
		},
		copy: func(dst, src *Config) { *get(dst) = *get(src) },
		isZero: func(c *Config) bool {
			var zero T
			return *get(c) == zero
		},
	}
}

// stringList describes a list-of-strings argument whose entries norm checks
// and rewrites into canonical form. A file's list replaces an earlier one.
func stringList(key string, get func(*Config) *[]string, norm func(string) (string, error)) attrDef {
	return attrDef{
		key: key,
		decode: func(d *decoder, path string, a *hcl.Attribute, c *Config) bool {
			p := hclsrc.FieldPath(path)
			vals, ok := hclsrc.Read(&d.Decoder, a, p, configStyle.List) // null leaves the key unset
			if !ok {
				return false
			}
			// Point at the entry itself when the syntax lets us.
			exprs, diags := hcl.ExprList(a.Expr)
			if diags.HasErrors() || len(exprs) != len(vals) {
				exprs = nil
			}
			list := make([]string, 0, len(vals))
			failed := false
			for i, ev := range vals {
				r := a.Expr.Range()
				if exprs != nil {
					r = exprs[i].Range()
				}
				s, err := configStyle.String(ev)
				if err == nil {
					s, err = norm(s)
				}
				if err != nil {
					d.Fail(r, p.Index(i), err)
					failed = true
					continue
				}
				list = append(list, s)
			}
			if failed {
				return false
			}
			*get(c) = list
			return true
		},
		validate: func(c *Config, path string, pos SourcePos, errs *ConfigErrors) {
			list := *get(c)
			for i, s := range list {
				n, err := norm(s)
				if err != nil {
					errs.AddValue(pos, fmt.Sprintf("%s[%d]", path, i), configKinds, err)
					continue
				}
				list[i] = n
			}
		},
		copy:   func(dst, src *Config) { *get(dst) = cloneStrings(*get(src)) },
		isZero: func(c *Config) bool { return len(*get(c)) == 0 },
	}
}

// The conversions are hclsrc's, in the configuration's words.
var (
	toString   = configStyle.String
	toBool     = configStyle.Bool
	toInt64    = configStyle.Int64
	toUint64   = configStyle.Uint64
	toDuration = configStyle.Duration
)

func toInt(v cty.Value) (int, error) {
	n, err := configStyle.IntIn(v, math.MinInt, math.MaxInt)
	return int(n), err
}
