package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/volumehooks"
)

// volumeStore is what the volume hooks keep in the state DB
// (*state.DB implements it): an optional ability of Config.State, found
// by type assertion.
type volumeStore interface {
	volumemanager.Store
	volumehooks.ReportStore
}

// volumeRuntime is the node's CSI volume machinery: the node volume
// manager, the report queue and the hooks.
type volumeRuntime struct {
	manager *volumemanager.Manager
	reports *volumehooks.Reporter
	hooks   *volumehooks.VolumeHooks
	// done is closed when the reporter and the operators' claims
	// follower have ended.
	done chan struct{}
}

// newVolumes builds the volume runtime and adds its hooks to every alloc
// runner, when the client runs allocs, manages CSI plugins and its state
// DB keeps volume usage. It runs before the alloc runners are built.
func (c *Client) newVolumes() error {
	store, ok := c.cfg.State.(volumeStore)
	if !ok || c.plugins == nil {
		return nil
	}
	logger := c.logger.Named("volumes")
	plugins := volumemanager.PluginManager(c.plugins)
	m, err := volumemanager.New(volumemanager.Config{DataDir: c.cfg.DataDir, NodeID: c.nodeID, Store: store, Plugins: plugins,
		Logger: logger.Named("manager")})
	if err != nil {
		return err
	}
	claims := claimsClient{c}
	rep, err := volumehooks.NewReporter(volumehooks.ReporterConfig{Claims: claims, Store: store, Logger: logger})
	if err != nil {
		return err
	}
	hooks, err := volumehooks.NewVolumeHooks(volumehooks.VolumeConfig{DataDir: c.cfg.DataDir, NodeID: c.nodeID, Claims: claims,
		Volumes: m, Plugins: plugins, Reports: rep, Logger: logger, Context: c.ctx})
	if err != nil {
		return err
	}
	c.volumes = &volumeRuntime{manager: m, reports: rep, hooks: hooks, done: make(chan struct{})}
	// Copies: the config's slices may be shared with the caller's.
	h := c.cfg.Hooks
	h.Alloc = append(slices.Clone(h.Alloc), hooks.AllocHook())
	h.Task = append(slices.Clone(h.Task), hooks.TaskHook())
	c.cfg.Hooks = h
	return nil
}

// startVolumes, once the alloc runners are restored, sends the reports a
// previous run queued, tears down what no live alloc holds, and follows
// the node's operators' claims.
func (c *Client) startVolumes() {
	v := c.volumes
	if v == nil {
		return
	}
	v.hooks.Sweep(c.allocHoldsVolumes)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		v.reports.Run(c.ctx)
	}()
	go func() {
		defer wg.Done()
		v.hooks.RunOperatorClaims(c.ctx, claimsClient{c})
	}()
	go func() {
		wg.Wait()
		close(v.done)
	}()
}

// stopVolumes waits for the volume goroutines, which end with the
// client's context; teardowns not finished are in the state DB.
func (c *Client) stopVolumes() {
	v := c.volumes
	if v == nil {
		return
	}
	<-v.done
	v.hooks.Wait()
}

// claimsClient is the Claims service over the client's server failover,
// bound to the caller's context too (callConnCtx).
type claimsClient struct{ c *Client }

var (
	_ volumehooks.Claims      = claimsClient{}
	_ volumehooks.ClaimLister = claimsClient{}
)

// claimSlack is what a blocking ClientClaim attempt gets on top of its
// max wait for the answer to arrive.
const claimSlack = 30 * time.Second

func (cc claimsClient) ClientClaim(ctx context.Context, req *pb.ClientClaimRequest) (*pb.ClientClaimResponse, error) {
	c := cc.c
	req = proto.CloneOf(req)
	maxWait := c.watchMaxWait()
	if req.GetQuery().GetMinIndex() > 0 {
		q := proto.CloneOf(req.GetQuery())
		q.MaxWaitMs = maxWait.Milliseconds()
		req.Query = q
	}
	var resp *pb.ClientClaimResponse
	err := c.callConnCtx(ctx, func(left int) time.Duration {
		if req.GetQuery().GetMinIndex() > 0 {
			return maxWait + claimSlack
		}
		return c.attemptTimeout(left)
	}, func(actx context.Context, conn grpc.ClientConnInterface) error {
		var err error
		resp, err = pb.NewClaimsClient(conn).ClientClaim(actx, req)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim of volume %q for %s: %w", req.GetVolumeId(), claimant(req.GetAllocId(), req.GetClaimId()), err)
	}
	return resp, nil
}

func (cc claimsClient) ClientClaimUpdate(ctx context.Context, req *pb.ClientClaimUpdateRequest) (*pb.ClientClaimUpdateResponse, error) {
	c := cc.c
	var resp *pb.ClientClaimUpdateResponse
	err := c.callConnCtx(ctx, c.attemptTimeout, func(actx context.Context, conn grpc.ClientConnInterface) error {
		var err error
		resp, err = pb.NewClaimsClient(conn).ClientClaimUpdate(actx, req)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("report on the claim of volume %q for %s: %w", req.GetVolumeId(), claimant(req.GetAllocId(), req.GetClaimId()), err)
	}
	return resp, nil
}

func (cc claimsClient) ClientClaims(ctx context.Context, req *pb.ClientClaimsRequest) (*pb.ClientClaimsResponse, error) {
	c := cc.c
	req = proto.CloneOf(req)
	maxWait := c.watchMaxWait()
	q := proto.CloneOf(req.GetQuery())
	if q == nil {
		q = &pb.QueryOptions{}
	}
	q.MaxWaitMs = maxWait.Milliseconds()
	req.Query = q
	var resp *pb.ClientClaimsResponse
	err := c.callConnCtx(ctx, func(int) time.Duration { return maxWait + claimSlack }, func(actx context.Context, conn grpc.ClientConnInterface) error {
		var err error
		resp, err = pb.NewClaimsClient(conn).ClientClaims(actx, req)
		return err
	})
	if err != nil {
		if a := req.GetAllocId(); a != "" {
			return nil, fmt.Errorf("claims of alloc %s on node %s: %w", a, c.nodeID, err)
		}
		return nil, fmt.Errorf("operators' claims of node %s: %w", c.nodeID, err)
	}
	return resp, nil
}

func claimant(allocID, claimID string) string {
	if allocID != "" {
		return "alloc " + allocID
	}
	return "operator claim " + claimID
}

// bothContexts is a context that ends when either a or b does.
func bothContexts(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(a)
	stop := context.AfterFunc(b, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}
