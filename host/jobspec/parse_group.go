package jobspec

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"berth.dev/berth/internal/hclsrc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

func (d *decoder) group(b *hcl.Block, job *pb.Job) *pb.TaskGroup {
	g := &pb.TaskGroup{Name: b.Labels[0], Count: DefaultCount}
	p := path{}.in("group", g.Name)
	d.pos[p.String()] = d.Pos(b.DefRange)
	c := d.Content(b.Body, p, hclsrc.Schema{
		Attrs:  []string{"count"},
		Blocks: append(blocks("restart", "reschedule", "constraint", "update", "meta"), volumeBlock, taskBlock),
	})
	if a := c.Attributes["count"]; a != nil {
		if n, ok := d.integer(a, p.f("count")); ok {
			g.Count = int32(n)
		}
	}
	g.Restart = DefaultRestart(job.Type)
	if rb := d.Single(c.Blocks, "restart", p); rb != nil {
		d.restart(rb, p.f("restart"), g.Restart)
	}
	g.Reschedule = DefaultReschedule(job.Type)
	if rb := d.Single(c.Blocks, "reschedule", p); rb != nil {
		if g.Reschedule == nil {
			d.ErrAt(rb.DefRange, p.f("reschedule"), ErrInvalidJob,
				"system jobs are not rescheduled: their allocs belong to their nodes")
		} else {
			d.reschedule(rb, p.f("reschedule"), g.Reschedule)
		}
	}
	g.Constraints = d.constraints(c.Blocks, p)
	if ub := d.Single(c.Blocks, "update", p); ub != nil {
		g.Update = clone(job.Update)
		d.update(ub, p.f("update"), g.Update)
	}
	if mb := d.Single(c.Blocks, "meta", p); mb != nil {
		g.Meta = d.StringMap(mb.Body, p.f("meta"))
	}
	first := map[string]*hcl.Block{}
	for _, vb := range c.Blocks.OfType("volume") {
		name := vb.Labels[0]
		if f := first[name]; f != nil {
			d.Duplicate(f, vb, p.in("volume", name), fmt.Sprintf("volume %q", name))
			continue
		}
		first[name] = vb
		if g.Volumes == nil {
			g.Volumes = map[string]*pb.VolumeRequest{}
		}
		g.Volumes[name] = d.volume(vb, p.in("volume", name))
	}
	first = map[string]*hcl.Block{}
	for _, tb := range c.Blocks.OfType("task") {
		name := tb.Labels[0]
		if f := first[name]; f != nil {
			d.Duplicate(f, tb, p.in("task", name), fmt.Sprintf("task %q", name))
			continue
		}
		first[name] = tb
		g.Tasks = append(g.Tasks, d.task(tb, p.in("task", name)))
	}
	return g
}

var restartModes = map[string]pb.RestartMode{
	"fail":  pb.RestartMode_RESTART_MODE_FAIL,
	"delay": pb.RestartMode_RESTART_MODE_DELAY,
}

// restart decodes a restart block onto r, which holds the defaults.
func (d *decoder) restart(b *hcl.Block, p path, r *pb.RestartPolicy) {
	c := d.Content(b.Body, p, hclsrc.Schema{Attrs: []string{"attempts", "interval", "delay", "mode"}})
	if a := c.Attributes["attempts"]; a != nil {
		if n, ok := d.integer(a, p.f("attempts")); ok {
			r.Attempts = int32(n)
		}
	}
	if a := c.Attributes["interval"]; a != nil {
		if n, ok := d.duration(a, p.f("interval")); ok {
			r.IntervalMs = n
		}
	}
	if a := c.Attributes["delay"]; a != nil {
		if n, ok := d.duration(a, p.f("delay")); ok {
			r.DelayMs = n
		}
	}
	if a := c.Attributes["mode"]; a != nil {
		if s, ok := d.str(a, p.f("mode")); ok {
			if m, known := restartModes[s]; known {
				r.Mode = m
			} else {
				d.ErrAt(a.Expr.Range(), p.f("mode"), ErrInvalidJob, "unknown restart mode %q%s", s, didYouMean(s, []string{"fail", "delay"}))
			}
		}
	}
}

// reschedule decodes a reschedule block onto r, which holds the defaults.
func (d *decoder) reschedule(b *hcl.Block, p path, r *pb.ReschedulePolicy) {
	c := d.Content(b.Body, p, hclsrc.Schema{Attrs: []string{"attempts", "interval", "delay", "max_delay", "unlimited"}})
	if a := c.Attributes["attempts"]; a != nil {
		if n, ok := d.integer(a, p.f("attempts")); ok {
			r.Attempts = int32(n)
		}
	}
	if a := c.Attributes["interval"]; a != nil {
		if n, ok := d.duration(a, p.f("interval")); ok {
			r.IntervalMs = n
		}
	}
	if a := c.Attributes["delay"]; a != nil {
		if n, ok := d.duration(a, p.f("delay")); ok {
			r.DelayMs = n
			if c.Attributes["max_delay"] == nil {
				// A longer delay than the default cap is not meant to be
				// capped below itself.
				r.MaxDelayMs = max(r.MaxDelayMs, n)
			}
		}
	}
	if a := c.Attributes["max_delay"]; a != nil {
		if n, ok := d.duration(a, p.f("max_delay")); ok {
			r.MaxDelayMs = n
		}
	}
	if a := c.Attributes["unlimited"]; a != nil {
		if on, ok := d.boolean(a, p.f("unlimited")); ok {
			r.Unlimited = on
		}
	} else if c.Attributes["attempts"] != nil || c.Attributes["interval"] != nil {
		// Bounding the attempts means the default "unlimited" is not wanted.
		r.Unlimited = false
	}
}

func (d *decoder) volume(b *hcl.Block, p path) *pb.VolumeRequest {
	v := &pb.VolumeRequest{Name: b.Labels[0], Type: "csi"}
	d.pos[p.String()] = d.Pos(b.DefRange)
	c := d.Content(b.Body, p, hclsrc.Schema{
		Attrs:  []string{"type", "source", "read_only", "access_mode", "attachment_mode", "per_alloc", "sticky"},
		Blocks: blocks("mount_options"),
	})
	for key, dst := range map[string]*string{"type": &v.Type, "source": &v.Source, "access_mode": &v.AccessMode, "attachment_mode": &v.AttachmentMode} {
		if a := c.Attributes[key]; a != nil {
			if s, ok := d.str(a, p.f(key)); ok {
				*dst = s
			}
		}
	}
	if a := c.Attributes["read_only"]; a != nil {
		v.ReadOnly, _ = d.boolean(a, p.f("read_only"))
	}
	if a := c.Attributes["per_alloc"]; a != nil {
		v.PerAlloc, _ = d.boolean(a, p.f("per_alloc"))
	}
	if a := c.Attributes["sticky"]; a != nil {
		v.Sticky, _ = d.boolean(a, p.f("sticky"))
	}
	if mb := d.Single(c.Blocks, "mount_options", p); mb != nil {
		mp := p.f("mount_options")
		mc := d.Content(mb.Body, mp, hclsrc.Schema{Attrs: []string{"fs_type", "mount_flags"}})
		v.MountOptions = &pb.MountOptions{}
		if a := mc.Attributes["fs_type"]; a != nil {
			v.MountOptions.FsType, _ = d.str(a, mp.f("fs_type"))
		}
		if a := mc.Attributes["mount_flags"]; a != nil {
			v.MountOptions.MountFlags, _ = d.StringList(a, mp.f("mount_flags"))
		}
	}
	return v
}

var taskHooks = map[string]pb.TaskHook{
	"prestart":  pb.TaskHook_TASK_HOOK_PRESTART,
	"poststart": pb.TaskHook_TASK_HOOK_POSTSTART,
	"poststop":  pb.TaskHook_TASK_HOOK_POSTSTOP,
}

func (d *decoder) task(b *hcl.Block, p path) *pb.Task {
	t := &pb.Task{
		Name:          b.Labels[0],
		Resources:     DefaultResources(),
		KillTimeoutMs: ms(DefaultKillTimeout),
		KillSignal:    DefaultKillSignal,
		Logs:          DefaultLogs(),
	}
	d.pos[p.String()] = d.Pos(b.DefRange)
	c := d.Content(b.Body, p, hclsrc.Schema{
		Attrs: []string{"driver", "kill_timeout", "kill_signal", "leader", "user"},
		Blocks: blocks("config", "env", "resources", "meta", "lifecycle", "constraint",
			"volume_mount", "csi_plugin", "logs"),
	})
	if a := c.Attributes["driver"]; a != nil {
		t.Driver, _ = d.str(a, p.f("driver"))
	}
	if a := c.Attributes["kill_timeout"]; a != nil {
		if n, ok := d.duration(a, p.f("kill_timeout")); ok {
			t.KillTimeoutMs = n
		}
	}
	if a := c.Attributes["kill_signal"]; a != nil {
		if s, ok := d.str(a, p.f("kill_signal")); ok {
			t.KillSignal = s
		}
	}
	if a := c.Attributes["leader"]; a != nil {
		t.Leader, _ = d.boolean(a, p.f("leader"))
	}
	if a := c.Attributes["user"]; a != nil {
		t.User, _ = d.str(a, p.f("user"))
	}
	if cb := d.Single(c.Blocks, "config", p); cb != nil {
		t.Config = d.driverConfig(cb.Body, p.f("config"))
	}
	if eb := d.Single(c.Blocks, "env", p); eb != nil {
		t.Env = d.StringMap(eb.Body, p.f("env"))
	}
	if mb := d.Single(c.Blocks, "meta", p); mb != nil {
		t.Meta = d.StringMap(mb.Body, p.f("meta"))
	}
	if rb := d.Single(c.Blocks, "resources", p); rb != nil {
		rp := p.f("resources")
		rc := d.Content(rb.Body, rp, hclsrc.Schema{Attrs: []string{"cpu", "memory"}})
		if a := rc.Attributes["cpu"]; a != nil {
			if n, ok := d.integer(a, rp.f("cpu")); ok {
				t.Resources.CpuMhz = n
			}
		}
		if a := rc.Attributes["memory"]; a != nil {
			if n, ok := d.integer(a, rp.f("memory")); ok {
				t.Resources.MemoryMb = n
			}
		}
	}
	if lb := d.Single(c.Blocks, "lifecycle", p); lb != nil {
		t.Lifecycle = d.lifecycle(lb, p.f("lifecycle"))
	}
	t.Constraints = d.constraints(c.Blocks, p)
	for i, vb := range c.Blocks.OfType("volume_mount") {
		t.VolumeMounts = append(t.VolumeMounts, d.volumeMount(vb, p.at("volume_mount", i)))
	}
	if cb := d.Single(c.Blocks, "csi_plugin", p); cb != nil {
		t.CsiPlugin = d.csiPlugin(cb, p.f("csi_plugin"))
	}
	if lb := d.Single(c.Blocks, "logs", p); lb != nil {
		d.logs(lb, p.f("logs"), t.Logs)
	}
	return t
}

func (d *decoder) lifecycle(b *hcl.Block, p path) *pb.Lifecycle {
	c := d.Content(b.Body, p, hclsrc.Schema{Attrs: []string{"hook", "sidecar"}})
	l := &pb.Lifecycle{}
	if a := c.Attributes["hook"]; a != nil {
		if s, ok := d.str(a, p.f("hook")); ok {
			if h, known := taskHooks[s]; known {
				l.Hook = h
			} else {
				d.ErrAt(a.Expr.Range(), p.f("hook"), ErrInvalidJob, "unknown lifecycle hook %q%s",
					s, didYouMean(s, []string{"prestart", "poststart", "poststop"}))
			}
		}
	}
	if a := c.Attributes["sidecar"]; a != nil {
		l.Sidecar, _ = d.boolean(a, p.f("sidecar"))
	}
	return l
}

func (d *decoder) volumeMount(b *hcl.Block, p path) *pb.VolumeMount {
	d.pos[p.String()] = d.Pos(b.DefRange)
	c := d.Content(b.Body, p, hclsrc.Schema{Attrs: []string{"volume", "destination", "read_only", "propagation_mode"}})
	m := &pb.VolumeMount{}
	if a := c.Attributes["volume"]; a != nil {
		m.Volume, _ = d.str(a, p.f("volume"))
	}
	if a := c.Attributes["destination"]; a != nil {
		m.Destination, _ = d.str(a, p.f("destination"))
	}
	if a := c.Attributes["read_only"]; a != nil {
		m.ReadOnly, _ = d.boolean(a, p.f("read_only"))
	}
	if a := c.Attributes["propagation_mode"]; a != nil {
		m.PropagationMode, _ = d.str(a, p.f("propagation_mode"))
	}
	return m
}

func (d *decoder) csiPlugin(b *hcl.Block, p path) *pb.CSIPluginConfig {
	c := d.Content(b.Body, p, hclsrc.Schema{Attrs: []string{"id", "type", "mount_dir", "stage_publish_base_dir", "health_timeout"}})
	cp := &pb.CSIPluginConfig{MountDir: DefaultCSIMountDir, StagePublishBaseDir: DefaultCSIStagePublishBaseDir,
		HealthTimeoutMs: ms(DefaultCSIHealthTimeout)}
	for key, dst := range map[string]*string{"id": &cp.Id, "type": &cp.Type, "mount_dir": &cp.MountDir, "stage_publish_base_dir": &cp.StagePublishBaseDir} {
		if a := c.Attributes[key]; a != nil {
			if s, ok := d.str(a, p.f(key)); ok {
				*dst = s
			}
		}
	}
	if a := c.Attributes["health_timeout"]; a != nil {
		cp.HealthTimeoutMs, _ = d.duration(a, p.f("health_timeout"))
	}
	return cp
}

// logs decodes a logs block onto l, which holds the defaults;
// max_file_size is in MB, as in Nomad.
func (d *decoder) logs(b *hcl.Block, p path, l *driverpb.LogConfig) {
	c := d.Content(b.Body, p, hclsrc.Schema{Attrs: []string{"max_files", "max_file_size"}})
	if a := c.Attributes["max_files"]; a != nil {
		if n, ok := d.integer(a, p.f("max_files")); ok {
			if n < 1 {
				d.ErrAt(a.Expr.Range(), p.f("max_files"), ErrInvalidJob, "must be at least 1, got %d", n)
			} else {
				l.MaxFiles = uint32(n)
			}
		}
	}
	if a := c.Attributes["max_file_size"]; a != nil {
		if n, ok := d.integer(a, p.f("max_file_size")); ok {
			if n < 1 {
				d.ErrAt(a.Expr.Range(), p.f("max_file_size"), ErrInvalidJob, "must be at least 1 (MB), got %d", n)
			} else {
				l.MaxFileSizeBytes = uint64(n) << 20
			}
		}
	}
}
