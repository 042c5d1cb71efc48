package allocrunner

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// heldDestroys gives drivers whose DestroyTask waits until released.
type heldDestroys struct {
	inner      Drivers
	destroying chan string
	release    chan struct{}
}

func (h heldDestroys) Driver(name string) (taskrunner.Driver, error) {
	d, err := h.inner.Driver(name)
	if err != nil {
		return nil, err
	}
	return heldDestroy{d, h}, nil
}

type heldDestroy struct {
	taskrunner.Driver
	h heldDestroys
}

func (d heldDestroy) DestroyTask(ctx context.Context, id string, force bool) error {
	d.h.destroying <- id
	<-d.h.release
	return d.Driver.DestroyTask(ctx, id, force)
}

// A stopped alloc's postrun hooks (a volume's unpublish) run once its
// tasks are dead and their processes gone, while the driver still forgets
// the last attempts; the alloc is done only after that too.
func TestPostrunDoesNotWaitForTheDriverToForgetTheTask(t *testing.T) {
	e := newEnv(t)
	log := &callLog{}
	held := heldDestroys{inner: drivers_{e.m}, destroying: make(chan string, 1), release: make(chan struct{})}
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, nil, mockTask("web", nil))
	ar, _ := e.runner(a, j, func(c *Config) {
		c.Drivers = held
		c.Hooks = Hooks{Alloc: []func(runhooks.AllocInfo) runhooks.Hook{
			func(runhooks.AllocInfo) runhooks.Hook { return &recorder{name: "vol", log: log} },
		}}
	})
	waitTask(t, ar, "web", isRunning)
	stop := proto_clone(a)
	stop.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP
	stop.AllocModifyIndex = 11
	ar.Update(stop, j)
	select {
	case <-held.destroying:
	case <-time.After(generous):
		t.Fatal("the killed task's attempt was never destroyed")
	}
	testutil.WaitFor(t, generous, func() error {
		if !slices.Contains(log.get(), "vol.postrun") {
			return errors.New("postrun hooks not run while DestroyTask is held")
		}
		return nil
	})
	select {
	case <-ar.Done():
		t.Fatal("alloc done before its task's DestroyTask returned")
	default:
	}
	close(held.release)
	waitDone(t, ar)
}
