package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/builtin/csi/hostpath"
	"berth.dev/berth/csi"
)

// csiPlan is how much the CSI section measures.
type csiPlan struct {
	// rounds of one raw batch and one berth batch per call, in alternating
	// order (ABBA) so that drift favours neither.
	rounds, batch int
	// memBatch calls per batch over the in-memory connection.
	memBatch int
	// cycles full volume cycles per client, alternating the same way.
	cycles int
}

var (
	fullCSIPlan  = csiPlan{rounds: 60, batch: 300, memBatch: 20_000, cycles: 150}
	quickCSIPlan = csiPlan{rounds: 4, batch: 25, memBatch: 500, cycles: 4}
)

// csiTargetRatio is the goal for berth/raw per-call cost: deadlines,
// classification and typed results should cost under 5% of a round trip.
const csiTargetRatio = 1.05

// benchCSI measures what berth's CSI client adds to a call, against the
// generated gRPC client on the same connection to the built-in hostpath
// plugin, and the latency of a full volume cycle through both.
func benchCSI(opts options) (err error) {
	plan := fullCSIPlan
	if opts.quick {
		plan = quickCSIPlan
	}
	dir, err := os.MkdirTemp("", "berth-bench-csi-")
	if err != nil {
		return fmt.Errorf("creating plugin dir: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing plugin dir: %w", rerr))
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	sock := filepath.Join(dir, "csi.sock")
	cfg := hostpath.Config{Endpoint: "unix://" + sock, NodeID: "bench-node", StateDir: filepath.Join(dir, "state")}
	stopped := make(chan error, 1)
	go func() { stopped <- hostpath.Run(ctx, cfg) }()
	defer func() {
		cancel()
		if serr := <-stopped; serr != nil {
			err = errors.Join(err, fmt.Errorf("hostpath plugin: %w", serr))
		}
	}()

	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	b := &csiBench{
		plan: plan,
		dir:  dir,
		lib:  csi.New(cc),
		raw: rawCSI{
			identity:   csipb.NewIdentityClient(cc),
			controller: csipb.NewControllerClient(cc),
			node:       csipb.NewNodeClient(cc),
		},
		memLib: csi.New(memConn{}),
		memRaw: rawCSI{
			identity:   csipb.NewIdentityClient(memConn{}),
			controller: csipb.NewControllerClient(memConn{}),
			node:       csipb.NewNodeClient(memConn{}),
		},
	}
	if err := b.waitReady(ctx); err != nil {
		return err
	}
	return b.run(ctx)
}

type rawCSI struct {
	identity   csipb.IdentityClient
	controller csipb.ControllerClient
	node       csipb.NodeClient
}

type csiBench struct {
	plan csiPlan
	dir  string
	lib  *csi.Client
	raw  rawCSI
	// memLib and memRaw talk to memConn: the client's own work, no transport.
	memLib *csi.Client
	memRaw rawCSI
}

func (b *csiBench) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r := csi.Retry{Initial: 10 * time.Millisecond, Max: 250 * time.Millisecond}
	return r.Do(ctx, csi.CallProbe, "", func(ctx context.Context) error {
		ready, err := b.lib.Identity.Probe(ctx)
		if err == nil && !ready {
			return &csi.Error{Call: csi.CallProbe, Code: codes.Unavailable, Message: "not ready"}
		}
		return err
	})
}

// callPair is one call made both ways. raw carries the same deadline berth
// puts on the call, since every call must have one; bare is the raw call
// without it, to show what the deadline itself costs.
type callPair struct {
	name           string
	raw, lib, bare func(context.Context) error
}

// batchResult is one batch's cost per call.
type batchResult struct{ wall, cpu time.Duration }

func (b *csiBench) run(ctx context.Context) error {
	capability := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	created, err := b.lib.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "bench-lookup", VolumeCapabilities: []*csipb.VolumeCapability{capability},
	})
	if err != nil {
		return err
	}
	id := created.GetVolume().GetVolumeId()
	defer b.lib.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})

	pairs := csiPairs(b.raw, b.lib, id)
	memPairs := csiPairs(b.memRaw, b.memLib, id)

	fmt.Printf("Per-call cost of berth's CSI client against the generated gRPC client (given the same per-call deadline) on the same connection to the hostpath plugin (unix socket): "+
		"%d interleaved rounds of %d calls each way; ratios are medians of per-round berth/raw (range in brackets); CPU is the whole process's (client and plugin). "+
		"\"added\" is the client's own work per call measured without transport (an in-memory connection, %d calls per batch), "+
		"and \"ratio from added\" is (raw CPU + added) / raw CPU, the figure machine load distorts least; the target applies to it.\n\n",
		b.plan.rounds, b.plan.batch, b.plan.memBatch)
	fmt.Println("| call | raw µs/call | berth µs/call | wall ratio | CPU ratio | added µs/call | ratio from added | target |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---|")
	for i, p := range pairs {
		added, err := b.added(ctx, memPairs[i])
		if err != nil {
			return fmt.Errorf("%s over memory: %w", p.name, err)
		}
		raws, libs, err := b.interleave(ctx, p, b.plan.batch)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		wall, cpu := csiRatios(raws, libs)
		base := csiMedian(cpus(raws))
		if base == 0 { // no CPU figures on this platform
			base = csiMedian(walls(raws))
		}
		fromAdded := (base + added) / base
		verdict := "ok"
		if fromAdded > csiTargetRatio {
			verdict = "over"
		}
		fmt.Printf("| %s | %.1f | %.1f | %s | %s | %.2f | %.3f | ≤ %.2f %s |\n", p.name,
			micros(csiMedian(walls(raws))), micros(csiMedian(walls(libs))), csiRatioText(wall), csiRatioText(cpu),
			micros(added), fromAdded, csiTargetRatio, verdict)
	}

	// The raw baseline above carries a deadline too; what the deadline
	// itself costs (a timer on both ends, the grpc-timeout header) is here.
	p := pairs[1]
	bares, timed, err := b.interleave(ctx, callPair{raw: p.bare, lib: p.raw}, b.plan.batch)
	if err != nil {
		return fmt.Errorf("%s without deadline: %w", p.name, err)
	}
	wall, cpu := csiRatios(bares, timed)
	fmt.Printf("\nFor scale, a deadline on the call — which both columns above carry — costs the raw client %.1f µs per %s round trip (wall ratio with/without %s, CPU ratio %s).\n",
		micros(csiMedian(walls(timed))-csiMedian(walls(bares))), p.name, csiRatioText(wall), csiRatioText(cpu))
	return b.cycles(ctx, capability)
}

// added returns the client's own work per call in ns: berth minus raw over
// the in-memory connection, the median over interleaved rounds.
func (b *csiBench) added(ctx context.Context, p callPair) (float64, error) {
	raws, libs, err := b.interleave(ctx, p, b.plan.memBatch)
	if err != nil {
		return 0, err
	}
	diffs := make([]float64, len(raws))
	for i := range raws {
		diffs[i] = float64(libs[i].wall - raws[i].wall)
	}
	return max(csiMedian(diffs), 0), nil
}

// interleave runs b.plan.rounds rounds of one raw and one berth batch of n
// calls, in alternating order (ABBA) so that drift favours neither.
func (b *csiBench) interleave(ctx context.Context, p callPair, n int) (raws, libs []batchResult, err error) {
	for round := range b.plan.rounds {
		order := []bool{false, true} // false: raw
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, lib := range order {
			fn := p.raw
			if lib {
				fn = p.lib
			}
			r, err := b.batchOf(ctx, fn, n)
			if err != nil {
				return nil, nil, err
			}
			if lib {
				libs = append(libs, r)
			} else {
				raws = append(raws, r)
			}
		}
	}
	return raws, libs, nil
}

// batchOf runs fn n times and returns the cost of one call.
func (b *csiBench) batchOf(ctx context.Context, fn func(context.Context) error, n int) (batchResult, error) {
	cpu0, _ := processCPU()
	start := time.Now()
	for range n {
		if err := fn(ctx); err != nil {
			return batchResult{}, err
		}
	}
	wall := time.Since(start)
	cpu1, _ := processCPU()
	return batchResult{wall: wall / time.Duration(n), cpu: (cpu1 - cpu0) / time.Duration(n)}, nil
}

// csiPairs builds the measured calls over one raw and one berth client.
func csiPairs(raw rawCSI, lib *csi.Client, volumeID string) []callPair {
	pairs := []callPair{
		{
			name: "GetPluginInfo",
			bare: func(ctx context.Context) error {
				_, err := raw.identity.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
				return err
			},
			lib: func(ctx context.Context) error { _, err := lib.Identity.GetPluginInfo(ctx); return err },
		},
		{
			name: "NodeGetCapabilities",
			bare: func(ctx context.Context) error {
				_, err := raw.node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
				return err
			},
			lib: func(ctx context.Context) error { _, err := lib.Node.NodeGetCapabilities(ctx); return err },
		},
		{
			name: "ControllerGetVolume",
			bare: func(ctx context.Context) error {
				_, err := raw.controller.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: volumeID})
				return err
			},
			lib: func(ctx context.Context) error {
				_, err := lib.Controller.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: volumeID})
				return err
			},
		},
	}
	timeouts := csi.DefaultTimeouts()
	for i := range pairs {
		bare, d := pairs[i].bare, timeouts[csi.Call(pairs[i].name)]
		pairs[i].raw = func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			return bare(ctx)
		}
	}
	return pairs
}

// memConn answers at once with a canned valid response per method, so that
// a call over it costs only the client's own work.
type memConn struct{}

var memResponses = map[string]proto.Message{
	csipb.Identity_GetPluginInfo_FullMethodName:         &csipb.GetPluginInfoResponse{Name: "mem", VendorVersion: "1"},
	csipb.Node_NodeGetCapabilities_FullMethodName:       &csipb.NodeGetCapabilitiesResponse{},
	csipb.Controller_ControllerGetVolume_FullMethodName: &csipb.ControllerGetVolumeResponse{Volume: &csipb.Volume{VolumeId: "mem"}},
}

func (memConn) Invoke(_ context.Context, method string, _, reply any, _ ...grpc.CallOption) error {
	resp, ok := memResponses[method]
	out, isMsg := reply.(proto.Message)
	if !ok || !isMsg {
		return status.Errorf(codes.Unimplemented, "memConn: no response for %s", method)
	}
	proto.Merge(out, resp)
	return nil
}

func (memConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "memConn: no streams")
}

// cycles measures create → controller publish → stage → publish → unpublish
// → unstage → controller unpublish → delete, through both clients.
func (b *csiBench) cycles(ctx context.Context, capability *csipb.VolumeCapability) error {
	fmt.Println()
	if uid := os.Geteuid(); uid != 0 {
		fmt.Printf("Volume cycle: skipped — staging and publishing bind-mount, which needs root (running as uid %d).\n", uid)
		return nil
	}
	info, err := b.lib.Node.NodeGetInfo(ctx)
	if err != nil {
		return err
	}
	var raws, libs []time.Duration
	for i := range b.plan.cycles {
		order := []bool{false, true}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, lib := range order {
			name := fmt.Sprintf("cycle-%d-raw", i)
			var calls volumeCalls = rawCalls{b.raw}
			if lib {
				name = fmt.Sprintf("cycle-%d-berth", i)
				calls = libCalls{b.lib.Controller, b.lib.Node}
			}
			start := time.Now()
			if err := b.volumeCycle(ctx, calls, name, info.GetNodeId(), capability); err != nil {
				return fmt.Errorf("volume cycle %s: %w", name, err)
			}
			if lib {
				libs = append(libs, time.Since(start))
			} else {
				raws = append(raws, time.Since(start))
			}
		}
	}
	slices.Sort(raws)
	slices.Sort(libs)
	fmt.Printf("Full volume cycle against the hostpath plugin (create, controller publish, stage, publish, unpublish, unstage, controller unpublish, delete; real bind mounts), %d cycles each way, interleaved.\n\n", b.plan.cycles)
	fmt.Println("| client | p50 | p99 | p50 ratio |")
	fmt.Println("|---|---:|---:|---:|")
	fmt.Printf("| raw gRPC | %s | %s | 1.00 |\n", csiMillis(csiPercentile(raws, 0.5)), csiMillis(csiPercentile(raws, 0.99)))
	fmt.Printf("| berth | %s | %s | %.2f |\n", csiMillis(csiPercentile(libs, 0.5)), csiMillis(csiPercentile(libs, 0.99)),
		float64(csiPercentile(libs, 0.5))/float64(csiPercentile(raws, 0.5)))
	return nil
}

// cyclePaths are where a cycle stages and publishes volume id.
func (b *csiBench) cyclePaths(name, id string) (staging, target string) {
	return filepath.Join(b.dir, "staging", id), filepath.Join(b.dir, "publish", name, id)
}

// volumeCalls is the CSI calls a volume cycle makes, with the signatures
// berth's client gives them. Both sides of the comparison run the one
// cycle, so they make exactly the same calls in the same order.
type volumeCalls interface {
	CreateVolume(context.Context, *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error)
	ControllerPublishVolume(context.Context, *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error)
	ControllerUnpublishVolume(context.Context, *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error)
	DeleteVolume(context.Context, *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error)
	NodeStageVolume(context.Context, *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error)
	NodePublishVolume(context.Context, *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error)
	NodeUnpublishVolume(context.Context, *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error)
	NodeUnstageVolume(context.Context, *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error)
}

// libCalls is berth's client as volumeCalls.
type libCalls struct {
	*csi.ControllerClient
	*csi.NodeClient
}

// rawCalls is the generated clients as volumeCalls: the same calls without
// the per-call options berth's client does not take.
type rawCalls struct{ rawCSI }

var (
	_ volumeCalls = libCalls{}
	_ volumeCalls = rawCalls{}
)

func (r rawCalls) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	return r.controller.CreateVolume(ctx, req)
}

func (r rawCalls) ControllerPublishVolume(ctx context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	return r.controller.ControllerPublishVolume(ctx, req)
}

func (r rawCalls) ControllerUnpublishVolume(ctx context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	return r.controller.ControllerUnpublishVolume(ctx, req)
}

func (r rawCalls) DeleteVolume(ctx context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	return r.controller.DeleteVolume(ctx, req)
}

func (r rawCalls) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	return r.node.NodeStageVolume(ctx, req)
}

func (r rawCalls) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	return r.node.NodePublishVolume(ctx, req)
}

func (r rawCalls) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	return r.node.NodeUnpublishVolume(ctx, req)
}

func (r rawCalls) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	return r.node.NodeUnstageVolume(ctx, req)
}

// volumeCycle creates a volume and takes it through controller publish,
// stage, publish and back to deleted, through c. A failed cycle undoes what
// it did, so nothing stays mounted behind it.
func (b *csiBench) volumeCycle(ctx context.Context, c volumeCalls, name, node string, capability *csipb.VolumeCapability) (err error) {
	created, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{capability}})
	if err != nil {
		return err
	}
	vol := created.GetVolume()
	id := vol.GetVolumeId()
	staging, target := b.cyclePaths(name, id)
	defer func() {
		if err != nil {
			c.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
			c.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
			c.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node})
			c.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
		}
	}()
	pub, err := c.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
		VolumeId: id, NodeId: node, VolumeCapability: capability, VolumeContext: vol.GetVolumeContext()})
	if err != nil {
		return err
	}
	if _, err := c.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, PublishContext: pub.GetPublishContext(),
		StagingTargetPath: staging, VolumeCapability: capability, VolumeContext: vol.GetVolumeContext()}); err != nil {
		return err
	}
	if _, err := c.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, PublishContext: pub.GetPublishContext(),
		StagingTargetPath: staging, TargetPath: target, VolumeCapability: capability, VolumeContext: vol.GetVolumeContext()}); err != nil {
		return err
	}
	if _, err := c.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		return err
	}
	if _, err := c.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		return err
	}
	if _, err := c.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node}); err != nil {
		return err
	}
	_, err = c.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	return err
}

// csiRatios returns berth/raw wall and CPU cost for each round; the two
// batches of a round ran back to back.
func csiRatios(raws, libs []batchResult) (wall, cpu []float64) {
	for i := range min(len(raws), len(libs)) {
		if raws[i].wall > 0 {
			wall = append(wall, float64(libs[i].wall)/float64(raws[i].wall))
		}
		if raws[i].cpu > 0 {
			cpu = append(cpu, float64(libs[i].cpu)/float64(raws[i].cpu))
		}
	}
	return wall, cpu
}

func walls(rs []batchResult) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = float64(r.wall)
	}
	return out
}

func cpus(rs []batchResult) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = float64(r.cpu)
	}
	return out
}

func csiMedian(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func csiRatioText(rs []float64) string {
	if len(rs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f (%.2f–%.2f)", csiMedian(rs), slices.Min(rs), slices.Max(rs))
}

// csiPercentile returns the q-quantile of sorted (nearest rank).
func csiPercentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func micros(ns float64) float64 { return ns / 1e3 }

func csiMillis(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
