package volumehooks

import (
	"context"
	"fmt"
	"strings"

	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// EnvVolumePrefix and VarVolumePrefix name what a task gets of a mounted
// volume: BERTH_VOLUME_<NAME> and ${volume.<name>}.
const (
	EnvVolumePrefix = "BERTH_VOLUME_"
	VarVolumePrefix = "volume."
)

// taskMount is one volume_mount of a task, with the volume's publish path.
type taskMount struct {
	mount *pb.VolumeMount
	vol   csiVolume
	path  string
}

// mountHook gives a task its volume_mounts: bind mounts of the publish
// paths for an isolating driver, the host paths for an unisolated one.
type mountHook struct {
	mounts []taskMount
}

var _ taskrunner.PrestartHook = (*mountHook)(nil)

func (h *mountHook) Name() string { return "csi_volume_mounts" }

// EnvName is the environment variable a volume_mount's volume is named
// in: BERTH_VOLUME_ and the group volume's name, upper-cased, with every
// character other than a letter, digit or underscore made an underscore.
func EnvName(volume string) string {
	var b strings.Builder
	b.WriteString(EnvVolumePrefix)
	for _, r := range strings.ToUpper(volume) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// Prestart tells the task where its volumes are. Under an isolating
// driver the publish path is bind-mounted at the volume_mount's
// destination (read-only when the mount or the group's request says so)
// and the env and ${volume.<name>} are the destination; under an
// unisolated one (raw_exec) they are the host's publish path — berth
// gives raw_exec tasks CSI volumes, read_only then being the plugin's
// read-only publish alone.
func (h *mountHook) Prestart(ctx context.Context, req *taskrunner.PrestartRequest, resp *taskrunner.PrestartResponse) error {
	isolated := false
	if req.Driver != nil {
		var err error
		if isolated, err = req.Driver.HonoursMounts(ctx); err != nil {
			return fmt.Errorf("volume mounts of task %q in alloc %s: asking driver %q whether it honours mounts: %w",
				req.Task.GetName(), req.Alloc.GetId(), req.Task.GetDriver(), err)
		}
	}
	resp.Env, resp.Vars = map[string]string{}, map[string]string{}
	for _, m := range h.mounts {
		name := m.mount.GetVolume()
		where := m.path
		if isolated {
			where = m.mount.GetDestination()
			resp.Mounts = append(resp.Mounts, &driverpb.Mount{HostPath: m.path, TaskPath: where,
				ReadOnly: m.mount.GetReadOnly() || m.vol.req.GetReadOnly()})
		}
		resp.Env[EnvName(name)] = where
		resp.Vars[VarVolumePrefix+name] = where
	}
	return nil
}
