package ctrdriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// sharedLabel is the container label listing (as JSON) the host dirs
// berth made shared mount points for the container, so a DestroyTask
// without the task's handle can release them.
const sharedLabel = "berth.shared"

// containerLabels are the labels of a task's container.
func containerLabels(cfg *driverpb.TaskConfig, shared []string) map[string]string {
	labels := map[string]string{
		"berth.task_id": cfg.GetId(), "berth.alloc_id": cfg.GetAllocId(), "berth.job_id": cfg.GetJobId(),
		"berth.group": cfg.GetGroup(), "berth.task": cfg.GetName(),
	}
	if len(shared) > 0 {
		b, _ := json.Marshal(shared)
		labels[sharedLabel] = string(b)
	}
	return labels
}

// removeContainer kills and deletes ctr's task, if it has one, deletes
// the container with its snapshot and releases the shared mount points
// its labels name. ctx carries the container's namespace.
func (d *Driver) removeContainer(ctx context.Context, ctr client.Container, taskID string) error {
	cid := ctr.ID()
	var shared []string
	if labels, err := ctr.Labels(ctx); err == nil && labels[sharedLabel] != "" {
		if err := json.Unmarshal([]byte(labels[sharedLabel]), &shared); err != nil {
			d.logger.Warn("container has an unreadable shared-mounts label", "container_id", cid, "error", err)
		}
	}
	if proc, err := ctr.Task(ctx, nil); err == nil {
		if _, err := proc.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("task %q: delete the task of container %s: %w", taskID, cid, err)
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("task %q: container %s: %w", taskID, cid, err)
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("task %q: delete container %s: %w", taskID, cid, err)
	}
	return errors.Join(d.releaseUnowned(shared)...)
}

// destroyUnknown is DestroyTask of a task ID this plugin does not hold:
// its container, if containerd has one, was started by a plugin that
// died before it returned a handle, or was not taken back by RecoverTask;
// nothing else would ever stop or delete it.
func (d *Driver) destroyUnknown(ctx context.Context, taskID string, force bool) error {
	c, pc, release := d.hold()
	defer release()
	if c == nil {
		return fmt.Errorf("destroy %q: %w: no plugin config set", taskID, sdk.ErrDriverUnhealthy)
	}
	d.mu.Lock()
	starting := d.starting[taskID]
	d.mu.Unlock()
	if starting {
		return fmt.Errorf("destroy %q: its StartTask is in progress: %w", taskID, sdk.ErrTaskRunning)
	}
	ctx = namespaces.WithNamespace(ctx, pc.namespace)
	cid := containerID(taskID)
	ctr, err := c.LoadContainer(ctx, cid)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy %q: look up container %s: %w", taskID, cid, err)
	}
	if !force {
		if proc, err := ctr.Task(ctx, nil); err == nil {
			if st, err := proc.Status(ctx); err == nil && st.Status != client.Stopped {
				return fmt.Errorf("destroy %q: container %s: %w", taskID, cid, sdk.ErrTaskRunning)
			}
		}
	}
	d.logger.Warn("destroying a container no handle names", "task_id", taskID, "container_id", cid)
	if err := d.removeContainer(ctx, ctr, taskID); err != nil {
		return fmt.Errorf("destroy %q: %w", taskID, err)
	}
	return nil
}
