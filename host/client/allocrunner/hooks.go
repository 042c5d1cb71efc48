package allocrunner

import (
	"context"
	"time"

	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/pb"
)

// Hooks are the hooks a client adds to every alloc runner: the volume
// hook and the csi_plugin supervisor register here. A factory returns nil
// when it has nothing for this alloc or task.
type Hooks struct {
	Alloc []func(runhooks.AllocInfo) runhooks.Hook
	Task  []func(runhooks.AllocInfo, *pb.Task) runhooks.Hook
}

// allocDirHook builds the alloc dir before anything runs and removes it
// when the alloc is destroyed. It is registered first, so it builds first
// and removes last.
type allocDirHook struct{}

func (allocDirHook) Name() string { return "alloc_dir" }

func (allocDirHook) Prerun(_ context.Context, req *runhooks.PrerunRequest) error {
	return req.Dir.Build()
}

func (allocDirHook) Destroy(_ context.Context, req *runhooks.AllocDestroyRequest) error {
	return req.Dir.Destroy()
}

// hookTimeout is the deadline of a hook's call.
func hookTimeout(h runhooks.Hook, def time.Duration) time.Duration {
	if t, ok := h.(runhooks.Timeouter); ok && t.Timeout() > 0 {
		return t.Timeout()
	}
	return def
}
