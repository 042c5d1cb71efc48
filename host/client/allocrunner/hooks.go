package allocrunner

import (
	"context"
	"time"

	"berth.dev/berth/host/client/allocdir"
	"berth.dev/berth/host/client/taskenv"
	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/rpc/pb"
)

// Hook is an alloc runner hook. A hook implements the phases it needs
// (PrerunHook, UpdateHook, PostrunHook, DestroyHook), found by type
// assertion; it may implement taskrunner.Timeouter to set its calls'
// deadline. See the package doc for the order and the guarantees.
type Hook interface {
	Name() string
}

// AllocInfo is what every alloc hook call is told.
type AllocInfo struct {
	Alloc *pb.Allocation
	Job   *pb.Job
	Group *pb.TaskGroup
	Node  taskenv.Node
	Dir   *allocdir.AllocDir
	// Events records a task event on every task of the alloc (a volume
	// published, a claim waited for).
	Events taskrunner.Emitter
}

// PrerunRequest is given to PrerunHook.Prerun.
type PrerunRequest struct {
	AllocInfo
	// Recovered is set when the alloc was recovered after a client
	// restart (its tasks may be running already).
	Recovered bool
}

// PrerunHook runs before any task of the alloc starts. It may block until
// something the tasks need is ready (within its deadline); an error fails
// the alloc without starting any task.
type PrerunHook interface {
	Hook
	Prerun(ctx context.Context, req *PrerunRequest) error
}

// UpdateRequest is given to UpdateHook.Update.
type UpdateRequest struct {
	AllocInfo
}

// UpdateHook runs when the servers changed the alloc (a new
// alloc_modify_index) and it still runs: an in-place update.
type UpdateHook interface {
	Hook
	Update(ctx context.Context, req *UpdateRequest) error
}

// PostrunRequest is given to PostrunHook.Postrun.
type PostrunRequest struct {
	AllocInfo
	// ClientStatus is the alloc's final status.
	ClientStatus pb.AllocClientStatus
}

// PostrunHook runs once every task of the alloc is dead for good.
type PostrunHook interface {
	Hook
	Postrun(ctx context.Context, req *PostrunRequest) error
}

// DestroyRequest is given to DestroyHook.Destroy.
type DestroyRequest struct {
	AllocInfo
}

// DestroyHook runs when the alloc is destroyed (the servers no longer
// send it), after Postrun.
type DestroyHook interface {
	Hook
	Destroy(ctx context.Context, req *DestroyRequest) error
}

// Hooks are the hooks a client adds to every alloc runner: the volume
// hook and the csi_plugin supervisor register here. A factory returns nil
// when it has nothing for this alloc or task.
type Hooks struct {
	Alloc []func(AllocInfo) Hook
	Task  []func(AllocInfo, *pb.Task) taskrunner.Hook
}

// allocDirHook builds the alloc dir before anything runs and removes it
// when the alloc is destroyed. It is registered first, so it builds first
// and removes last.
type allocDirHook struct{}

func (allocDirHook) Name() string { return "alloc_dir" }

func (allocDirHook) Prerun(_ context.Context, req *PrerunRequest) error { return req.Dir.Build() }

func (allocDirHook) Destroy(_ context.Context, req *DestroyRequest) error { return req.Dir.Destroy() }

// hookTimeout is the deadline of a hook's call.
func hookTimeout(h Hook, def time.Duration) time.Duration {
	if t, ok := h.(taskrunner.Timeouter); ok && t.Timeout() > 0 {
		return t.Timeout()
	}
	return def
}
