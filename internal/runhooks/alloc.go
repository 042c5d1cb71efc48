package runhooks

import (
	"context"

	"berth.dev/berth/internal/allocdir"
	"berth.dev/berth/internal/taskenv"
	"berth.dev/berth/rpc/pb"
)

// AllocInfo is what every alloc hook call is told.
type AllocInfo struct {
	Alloc *pb.Allocation
	Job   *pb.Job
	Group *pb.TaskGroup
	Node  taskenv.Node
	Dir   *allocdir.AllocDir
	// Events records a task event on every task of the alloc (a volume
	// published, a claim waited for).
	Events Emitter
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

// AllocDestroyRequest is given to AllocDestroyHook.Destroy.
type AllocDestroyRequest struct {
	AllocInfo
}

// AllocDestroyHook runs when the alloc is destroyed (the servers no longer
// send it), after Postrun.
type AllocDestroyHook interface {
	Hook
	Destroy(ctx context.Context, req *AllocDestroyRequest) error
}
