package ctrdriver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/logrotate"
)

// containerIDRE is containerd's identifier rule (at most 76 characters).
var containerIDRE = regexp.MustCompile(`^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$`)

// containerID is the container's ID in containerd: the task's ID when
// containerd accepts it, else a digest of it.
func containerID(taskID string) string {
	if len(taskID) <= 76 && containerIDRE.MatchString(taskID) {
		return taskID
	}
	sum := sha256.Sum256([]byte(taskID))
	return "berth-" + hex.EncodeToString(sum[:16])
}

// StartTask implements sdk.Driver: the image is loaded or pulled when
// missing, a container is created from it with the task's spec, and its
// process started with stdout and stderr going to the task's log files.
func (d *Driver) StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	tc, err := parseTaskConfig(cfg.GetDriverConfig())
	if err != nil {
		return nil, err
	}
	c, pc, release := d.hold()
	defer release()
	if c == nil {
		return nil, fmt.Errorf("%w: no plugin config set", sdk.ErrDriverUnhealthy)
	}
	if err := pc.gates.check(tc); err != nil {
		return nil, err
	}
	if fp := d.fp.Current(); fp.GetHealth() != driverpb.Health_HEALTH_HEALTHY {
		return nil, fmt.Errorf("%w: %s", sdk.ErrDriverUnhealthy, fp.GetHealthDescription())
	}
	// The ID is taken while the image is fetched, so a second start with
	// it is refused at once.
	id := cfg.GetId()
	if err := d.reserve(id); err != nil {
		return nil, err
	}
	defer d.release(id)
	t, err := d.start(namespaces.WithNamespace(ctx, pc.namespace), c, pc, cfg, tc)
	if err != nil {
		return nil, err
	}
	if err := d.tasks.Add(id, t); err != nil { // cannot happen: the ID was reserved
		return nil, err
	}
	state, err := json.Marshal(t.state)
	if err != nil {
		return nil, err
	}
	return &driverpb.TaskHandle{
		Version: handleVersion, Driver: Name, Config: cfg, State: driverpb.TaskState_TASK_STATE_RUNNING,
		DriverState: state, StartedAt: t.state.StartedAt,
	}, nil
}

// reserve takes a task ID for a start in progress.
func (d *Driver) reserve(id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.tasks.Get(id); err == nil || d.starting[id] {
		return fmt.Errorf("task %q: %w", id, sdk.ErrTaskExists)
	}
	if d.starting == nil {
		d.starting = map[string]bool{}
	}
	d.starting[id] = true
	return nil
}

func (d *Driver) release(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.starting, id)
}

// start does StartTask's work; on failure it leaves nothing behind in
// containerd.
func (d *Driver) start(ctx context.Context, c *client.Client, pc pluginConfig, cfg *driverpb.TaskConfig, tc *taskConfig) (_ *task, err error) {
	id := cfg.GetId()
	img, err := d.ensureImage(ctx, c, pc, id, tc)
	if err != nil {
		return nil, err
	}
	st := handleState{Namespace: pc.namespace, ContainerID: containerID(id), Image: img.Name()}
	if err := d.replaceLeftover(ctx, c, id, st.ContainerID); err != nil {
		return nil, err
	}
	var cleanups []func()
	defer func() {
		if err != nil {
			for i := len(cleanups) - 1; i >= 0; i-- {
				cleanups[i]()
			}
		}
	}()
	mounts, uses, shared, err := d.taskMounts(cfg, tc)
	st.Shared, st.Propagating = shared, uses
	cleanups = append(cleanups, func() { d.releaseShared(uses) })
	if err != nil {
		return nil, err
	}
	specOpts, err := specOptions(ctx, img, cfg, tc, mounts)
	if err != nil {
		return nil, err
	}
	ctr, err := c.NewContainer(ctx, st.ContainerID,
		client.WithImage(img),
		client.WithSnapshotter(pc.snapshotter),
		client.WithNewSnapshot(st.ContainerID+"-rootfs", img),
		client.WithRuntime(pc.runtime, nil),
		client.WithContainerLabels(containerLabels(cfg, shared)),
		client.WithNewSpec(specOpts...),
	)
	if err != nil {
		return nil, startError(img.Name(), "create container", err)
	}
	cleanups = append(cleanups, func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
		defer cancel()
		ctr.Delete(dctx, client.WithSnapshotCleanup)
	})
	st.FIFODir, err = fifoDir(cfg)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { os.RemoveAll(st.FIFODir) })
	creator, _, logs, err := attachIO(cfg, st.FIFODir, true)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() {
		for _, l := range logs {
			l.Close()
		}
	})
	proc, err := ctr.NewTask(ctx, creator)
	if err != nil {
		return nil, startError(img.Name(), "create task", err)
	}
	cleanups = append(cleanups, func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
		defer cancel()
		proc.Delete(dctx, client.WithProcessKill)
	})
	// Wait before Start, so a quick exit is not missed; the wait lives
	// as long as the task, not as long as this call.
	waitCtx, stopWait := context.WithCancel(namespaces.WithNamespace(context.Background(), pc.namespace))
	cleanups = append(cleanups, stopWait)
	exitCh, err := proc.Wait(waitCtx)
	if err != nil {
		return nil, fmt.Errorf("wait for task %q: %w", id, err)
	}
	st.StartedAt = time.Now().UnixNano() // before Start: the exit time containerd reports is later
	if err := proc.Start(ctx); err != nil {
		return nil, startError(img.Name(), "start", err)
	}
	st.Pid = proc.Pid()
	if err := ctx.Err(); err != nil {
		// The caller gave up while the container started: it will neither
		// get nor persist the handle, so the container must not run on.
		return nil, fmt.Errorf("start task %q: %w", id, err)
	}
	t := &task{cfg: cfg, state: st, client: c, unhold: d.holdAgain(c), ctr: ctr, proc: proc, logs: logs, waitCtx: waitCtx, stopWait: stopWait, done: make(chan struct{})}
	go d.watch(t, exitCh)
	d.events.Emit(id, fmt.Sprintf("Started container %s from image %s (pid %d)", st.ContainerID, st.Image, st.Pid),
		map[string]string{"container_id": st.ContainerID, "image": st.Image})
	return t, nil
}

// replaceLeftover removes a container with the task's ID that this
// plugin does not know (reserve made sure): one a plugin created in a
// StartTask it did not live to answer, which nothing supervises and no
// handle names.
func (d *Driver) replaceLeftover(ctx context.Context, c *client.Client, taskID, cid string) error {
	ctr, err := c.LoadContainer(ctx, cid)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("task %q: look up container %s: %w", taskID, cid, err)
	}
	d.logger.Warn("replacing a container no handle names (its plugin died starting it)", "task_id", taskID, "container_id", cid)
	d.events.Emit(taskID, fmt.Sprintf("Replacing container %s, left by a start that did not finish", cid), map[string]string{"container_id": cid})
	return d.removeContainer(ctx, ctr, taskID)
}

// startError turns containerd's refusal to create or start the container
// into a StartError, so the job's author reads why.
func startError(image, step string, err error) error {
	var ce *sdk.ConfigError
	if errors.As(err, &ce) {
		return err
	}
	reason := sdk.StartOther
	if errdefs.IsNotFound(err) {
		reason = sdk.StartNotFound
	}
	return &sdk.StartError{Reason: reason, Path: image, Detail: fmt.Sprintf("%s: %v", step, err)}
}

// fifoDir is where the task's stdout and stderr FIFOs live.
func fifoDir(cfg *driverpb.TaskConfig) (string, error) {
	dir := filepath.Join(cfg.GetTaskDir(), ".containerd-io")
	if cfg.GetTaskDir() == "" {
		dir = filepath.Join(os.TempDir(), "berth-containerd-io", cfg.GetId())
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("task %q: FIFO dir: %w", cfg.GetId(), err)
	}
	return dir, nil
}

// openLog opens one of the task's rotating log streams.
func openLog(dir, name string, lc *driverpb.LogConfig) (io.WriteCloser, error) {
	return logrotate.Open(logrotate.Config{Dir: dir, Name: name, MaxFiles: int(lc.GetMaxFiles()), MaxBytes: int64(lc.GetMaxFileSizeBytes())})
}

// RecoverTask implements sdk.Driver: the container is looked up in
// containerd by the handle's ID, its FIFOs reattached to the log files,
// and its exit (past or future) waited for.
func (d *Driver) RecoverTask(ctx context.Context, h *driverpb.TaskHandle) error {
	if h.GetDriver() != Name || h.GetVersion() != handleVersion {
		return fmt.Errorf("%w: from driver %q version %d", sdk.ErrInvalidHandle, h.GetDriver(), h.GetVersion())
	}
	var st handleState
	if err := json.Unmarshal(h.GetDriverState(), &st); err != nil {
		return fmt.Errorf("%w: %v", sdk.ErrInvalidHandle, err)
	}
	cfg := h.GetConfig()
	if st.ContainerID == "" || st.Namespace == "" || !sdk.ValidTaskID(cfg.GetId()) {
		return fmt.Errorf("%w: no container ID, namespace or task ID", sdk.ErrInvalidHandle)
	}
	if _, err := d.tasks.Get(cfg.GetId()); err == nil {
		return nil
	}
	c, _, release := d.hold()
	defer release()
	if c == nil {
		return fmt.Errorf("%w: no plugin config set", sdk.ErrDriverUnhealthy)
	}
	nctx := namespaces.WithNamespace(ctx, st.Namespace)
	ctr, err := c.LoadContainer(nctx, st.ContainerID)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("task %q: container %s is gone from containerd: %w", cfg.GetId(), st.ContainerID, sdk.ErrTaskNotFound)
	} else if err != nil {
		return fmt.Errorf("task %q: load container %s: %w", cfg.GetId(), st.ContainerID, err)
	}
	proc, logs, err := d.attachRecovered(nctx, ctr, cfg, st)
	if errors.Is(err, sdk.ErrTaskNotFound) {
		// containerd kept the container but lost its task (a reboot):
		// nothing will run it again, so it goes with its snapshot.
		if rerr := d.removeContainer(nctx, ctr, cfg.GetId()); rerr != nil {
			return fmt.Errorf("%w (and removing the container: %v)", err, rerr)
		}
		return err
	}
	if err != nil {
		return err
	}
	closeAll := func() {
		drainIO(proc.IO(), 0)
		for _, l := range logs {
			l.Close()
		}
	}
	waitCtx, stopWait := context.WithCancel(namespaces.WithNamespace(context.Background(), st.Namespace))
	exitCh, err := proc.Wait(waitCtx)
	if err != nil {
		stopWait()
		closeAll()
		return fmt.Errorf("task %q: wait for container %s: %w", cfg.GetId(), st.ContainerID, err)
	}
	t := &task{cfg: cfg, state: st, client: c, unhold: d.holdAgain(c), ctr: ctr, proc: proc, logs: logs, waitCtx: waitCtx, stopWait: stopWait, done: make(chan struct{})}
	if _, added := d.tasks.AddIfAbsent(cfg.GetId(), t); !added {
		t.unhold()
		stopWait()
		closeAll()
		return nil
	}
	d.adoptShared(st.uses(), st.Shared)
	go d.watch(t, exitCh)
	d.events.Emit(cfg.GetId(), fmt.Sprintf("Recovered container %s (pid %d)", st.ContainerID, st.Pid), map[string]string{"container_id": st.ContainerID})
	return nil
}

// attachRecovered loads the container's task for RecoverTask. A task
// still running gets its FIFOs reattached to the log files; one that
// ended while no plugin ran is loaded without IO: the shim closed its
// ends of the FIFOs at the exit, so an attach would wait for a writer
// that never comes (and what the task wrote meanwhile is gone with the
// pipes' buffers).
func (d *Driver) attachRecovered(ctx context.Context, ctr client.Container, cfg *driverpb.TaskConfig, st handleState) (client.Task, []io.Closer, error) {
	notFound := func(err error) error {
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("task %q: container %s has no task in containerd: %w", cfg.GetId(), st.ContainerID, sdk.ErrTaskNotFound)
		}
		return fmt.Errorf("task %q: attach to container %s: %w", cfg.GetId(), st.ContainerID, err)
	}
	proc, err := ctr.Task(ctx, nil)
	if err != nil {
		return nil, nil, notFound(err)
	}
	status, err := proc.Status(ctx)
	if err != nil {
		return nil, nil, notFound(err)
	}
	if status.Status == client.Stopped {
		return proc, nil, nil
	}
	_, attach, logs, err := attachIO(cfg, st.FIFODir, false)
	if err != nil {
		return nil, nil, err
	}
	// The task may end between the status and the attach: watch's bounded
	// drain covers that.
	proc, err = ctr.Task(ctx, attach)
	if err != nil {
		for _, l := range logs {
			l.Close()
		}
		return nil, nil, notFound(err)
	}
	return proc, logs, nil
}
