package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"time"

	execdriver "berth.dev/berth/builtin/drivers/exec"
	"berth.dev/berth/builtin/drivers/mock"
	"berth.dev/berth/builtin/drivers/rawexec"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// driverPlan is how much the drivers section measures.
type driverPlan struct {
	// rounds alternate in-process and plugin runs (ABBA), so drift on the
	// machine hits both alike; figures are medians over rounds.
	rounds int
	// starts is how many sequential StartTask calls a round times per side.
	starts int
	// burst tasks are started by workers concurrent callers for throughput.
	burst, workers int
	// rawExecStarts is how many /bin/true tasks a round starts per side.
	rawExecStarts int
	// launches is how many plugin processes are launched and timed.
	launches int
	// isolationStarts is how many tasks a round starts with raw_exec and
	// with exec each (both through go-plugin), for the isolation's cost.
	isolationStarts int
}

var (
	fullDriverPlan  = driverPlan{rounds: 4, starts: 500, burst: 2000, workers: 8, rawExecStarts: 25, launches: 40, isolationStarts: 50}
	quickDriverPlan = driverPlan{rounds: 1, starts: 30, burst: 60, workers: 4, rawExecStarts: 3, launches: 3, isolationStarts: 5}
)

// side is one way of calling a driver: in-process or through go-plugin.
type side struct {
	name   string
	driver sdk.Driver
	close  func()
}

// benchDrivers measures what the plugin boundary costs a driver: StartTask
// latency and throughput with the mock driver (and raw_exec starting
// /bin/true) called in-process versus through a go-plugin subprocess, and
// the time to launch a plugin.
func benchDrivers(opts options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	plan := fullDriverPlan
	if opts.quick {
		plan = quickDriverPlan
	}
	rep, err := runDrivers(ctx, plan)
	if err != nil {
		return err
	}
	rep.print()
	return nil
}

// runDrivers takes the measurements of plan.
func runDrivers(ctx context.Context, plan driverPlan) (*driverReport, error) {
	root, err := os.MkdirTemp("", "berth-bench-drivers-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)

	rep := &driverReport{plan: plan}
	mockSides, err := newSides(ctx, mock.Name, mock.New(nil), nil)
	if err != nil {
		return nil, err
	}
	defer closeSides(mockSides)
	enabled := sdk.ConfigMap{"enabled": sdk.BoolValue(true)}
	rawSides, err := newSides(ctx, rawexec.Name, rawexec.New(nil), enabled)
	if err != nil {
		return nil, err
	}
	defer closeSides(rawSides)
	// exec needs root (namespaces, mounts, cgroups); without it the
	// isolation rows say why they are missing.
	var execPlugin sdk.Driver
	if os.Geteuid() == 0 {
		execSides, err := newSides(ctx, execdriver.Name, execdriver.New(nil), enabled)
		if err != nil {
			return nil, err
		}
		defer closeSides(execSides)
		execPlugin = execSides[1].driver
	} else {
		rep.isolationSkipped = fmt.Sprintf("exec needs root; this bench runs as uid %d", os.Geteuid())
	}

	b := &driverBench{root: root}
	for round := range plan.rounds {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			lat, err := b.sequentialStarts(ctx, mockSides[i].driver, mockConfig, plan.starts)
			if err != nil {
				return nil, fmt.Errorf("mock %s: %w", mockSides[i].name, err)
			}
			rep.mockStart[i] = append(rep.mockStart[i], lat)
			rate, err := b.burstStarts(ctx, mockSides[i].driver, plan.burst, plan.workers)
			if err != nil {
				return nil, fmt.Errorf("mock %s burst: %w", mockSides[i].name, err)
			}
			rep.mockRate[i] = append(rep.mockRate[i], rate)
			start, exit, err := b.rawExecTrue(ctx, rawSides[i].driver, plan.rawExecStarts)
			if err != nil {
				return nil, fmt.Errorf("raw_exec %s: %w", rawSides[i].name, err)
			}
			rep.rawStart[i] = append(rep.rawStart[i], start)
			rep.rawExit[i] = append(rep.rawExit[i], exit)
		}
		if execPlugin == nil {
			continue
		}
		// raw_exec (0) and exec (1), both through go-plugin, alternating
		// which goes first.
		isolated := [2]sdk.Driver{rawSides[1].driver, execPlugin}
		for _, i := range order {
			lat, err := b.startsRunning(ctx, isolated[i], plan.isolationStarts)
			if err != nil {
				return nil, fmt.Errorf("isolation %s: %w", []string{rawexec.Name, execdriver.Name}[i], err)
			}
			rep.isoStart[i] = append(rep.isoStart[i], lat)
		}
	}
	if rep.launch, err = measureLaunches(ctx, plan.launches); err != nil {
		return nil, err
	}
	return rep, nil
}

// newSides returns the driver called in-process and the same driver served
// by a plugin subprocess of this binary, both configured with cfg.
func newSides(ctx context.Context, name string, inProcess sdk.Driver, cfg sdk.ConfigMap) ([]side, error) {
	cmd, err := driverPluginCmd(name)
	if err != nil {
		return nil, err
	}
	p, err := sdk.LaunchDriver(ctx, sdk.LaunchConfig{Name: name, Cmd: cmd})
	if err != nil {
		return nil, err
	}
	sides := []side{{name: "in-process", driver: inProcess, close: func() {}}, {name: "go-plugin", driver: p.Driver(), close: p.Kill}}
	for _, s := range sides {
		if err := s.driver.SetConfig(ctx, &driverpb.PluginConfig{Values: cfg}); err != nil {
			closeSides(sides)
			return nil, fmt.Errorf("%s %s: %w", name, s.name, err)
		}
	}
	return sides, nil
}

func closeSides(sides []side) {
	for _, s := range sides {
		s.close()
	}
}

// mockConfig is a mock task that runs until destroyed.
var mockConfig = sdk.ConfigMap{}

// driverBench runs the measurements.
type driverBench struct {
	root string
	seq  int
}

func (b *driverBench) nextID() string {
	b.seq++
	return fmt.Sprintf("bench-%d", b.seq)
}

// sequentialStarts times n StartTask calls one after another (each task is
// running when StartTask returns) and destroys the tasks untimed.
func (b *driverBench) sequentialStarts(ctx context.Context, d sdk.Driver, cfg sdk.ConfigMap, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		id := b.nextID()
		begin := time.Now()
		if _, err := d.StartTask(ctx, &driverpb.TaskConfig{Id: id, Name: "t", DriverConfig: cfg}); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(begin))
		if err := d.DestroyTask(ctx, id, true); err != nil {
			return nil, err
		}
	}
	slices.Sort(lat)
	return lat, nil
}

// burstStarts starts n tasks from workers concurrent callers and returns
// StartTask calls per second; the tasks are destroyed afterwards, untimed.
func (b *driverBench) burstStarts(ctx context.Context, d sdk.Driver, n, workers int) (float64, error) {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = b.nextID()
	}
	next := make(chan string, n)
	for _, id := range ids {
		next <- id
	}
	close(next)
	errs := make(chan error, workers)
	begin := time.Now()
	for range workers {
		go func() {
			for id := range next {
				if _, err := d.StartTask(ctx, &driverpb.TaskConfig{Id: id, Name: "t", DriverConfig: mockConfig}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var firstErr error
	for range workers {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	elapsed := time.Since(begin)
	for _, id := range ids {
		if err := d.DestroyTask(ctx, id, true); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(n) / elapsed.Seconds(), nil
}

// rawExecTrue starts n raw_exec tasks running /bin/true and returns the
// sorted StartTask latencies and StartTask-to-exit-reported latencies.
func (b *driverBench) rawExecTrue(ctx context.Context, d sdk.Driver, n int) (start, exit []time.Duration, err error) {
	for range n {
		id := b.nextID()
		dir, err := os.MkdirTemp(b.root, "task-")
		if err != nil {
			return nil, nil, err
		}
		cfg := &driverpb.TaskConfig{
			Id: id, Name: "true", TaskDir: dir,
			Env:          map[string]string{"PATH": "/usr/bin:/bin"},
			DriverConfig: sdk.ConfigMap{"command": sdk.StringValue("/bin/true")},
		}
		begin := time.Now()
		if _, err := d.StartTask(ctx, cfg); err != nil {
			return nil, nil, err
		}
		start = append(start, time.Since(begin))
		res, err := d.WaitTask(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		if res.GetExitCode() != 0 {
			return nil, nil, fmt.Errorf("/bin/true exited %v", res)
		}
		exit = append(exit, time.Since(begin))
		if err := d.DestroyTask(ctx, id, true); err != nil {
			return nil, nil, err
		}
	}
	slices.Sort(start)
	slices.Sort(exit)
	return start, exit, nil
}

// startsRunning times n StartTask calls of a task that keeps running
// (sleep), with memory and CPU resources so that exec creates and joins a
// cgroup; each is destroyed untimed. The same config goes to raw_exec,
// which ignores what it cannot use.
func (b *driverBench) startsRunning(ctx context.Context, d sdk.Driver, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		id := b.nextID()
		dir, err := os.MkdirTemp(b.root, "task-")
		if err != nil {
			return nil, err
		}
		cfg := &driverpb.TaskConfig{
			Id: id, Name: "sleep", TaskDir: dir,
			Env:          map[string]string{"PATH": "/usr/bin:/bin"},
			Resources:    &driverpb.Resources{CpuShares: 100, MemoryBytes: 64 << 20},
			DriverConfig: sdk.ConfigMap{"command": sdk.StringValue("/bin/sleep"), "args": sdk.ListValue("1000")},
		}
		begin := time.Now()
		if _, err := d.StartTask(ctx, cfg); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(begin))
		if err := d.DestroyTask(ctx, id, true); err != nil {
			return nil, err
		}
	}
	slices.Sort(lat)
	return lat, nil
}

// measureLaunches times n plugin launches: process start, go-plugin
// handshake and API negotiation, until the driver answers calls.
func measureLaunches(ctx context.Context, n int) ([]time.Duration, error) {
	var out []time.Duration
	for range n {
		cmd, err := driverPluginCmd(mock.Name)
		if err != nil {
			return nil, err
		}
		begin := time.Now()
		p, err := sdk.LaunchDriver(ctx, sdk.LaunchConfig{Name: mock.Name, Cmd: cmd})
		if err != nil {
			return nil, err
		}
		if _, err := p.Driver().Capabilities(ctx); err != nil {
			p.Kill()
			return nil, err
		}
		out = append(out, time.Since(begin))
		p.Kill()
	}
	slices.Sort(out)
	return out, nil
}
