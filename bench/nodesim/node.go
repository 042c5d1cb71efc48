package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"berth.dev/berth/builtin/drivers/mock"
	"berth.dev/berth/host/client"
	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// simNode is one simulated client node: host/client's Client itself — node
// identity and secret, registration, heartbeats at the TTL the servers
// answer, the alloc watch, alloc runners and task runners, the status
// updater, the CSI plugin manager, the volume hooks and claim reports —
// with the host's edges faked: the mock driver called in process (no
// plugin subprocess), a fake CSI node plugin called in process, and an
// in-memory state DB.
type simNode struct {
	c      *client.Client
	driver *countingDriver
}

// nodeOptions are what every simulated node shares.
type nodeOptions struct {
	servers []string
	tls     *tlsconf.Store
	// csi adds the fake CSI node plugin (with topology) to every node.
	csi bool
	// zones spreads the nodes' CSI topology over this many zones.
	zones  int
	logger hclog.Logger
	// dialOptions are added to every node's server connections.
	dialOptions []grpc.DialOption
	// phases, when set, records the volume scenario's steps on the nodes.
	phases *phaseLog
}

// startNode starts simulated node i with its data dir under root.
func startNode(root string, i int, o nodeOptions) (*simNode, error) {
	dir := filepath.Join(root, fmt.Sprintf("n%05d", i))
	name := fmt.Sprintf("sim-%05d", i)
	id, err := client.LoadNodeID(dir)
	if err != nil {
		return nil, err
	}
	drv := &countingDriver{Driver: mock.New(nil), phases: o.phases}
	store := newMemStore()
	cfg := client.Config{
		DataDir:     dir,
		NodeName:    name,
		Servers:     o.servers,
		Logger:      o.logger,
		Drivers:     simDrivers,
		TaskDrivers: simDriverSet{drv},
		State:       store,
		Identity:    store,
		TLS:         o.tls,
		Meta:        map[string]string{"nodesim": "true"},
		DialOptions: o.dialOptions,
	}
	if o.csi {
		cfg.CSIAdapters = newFakeAdapters(id, fmt.Sprintf("zone-%d", i%max(o.zones, 1)), o.phases)
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("simulated node %s: %w", name, err)
	}
	return &simNode{c: c, driver: drv}, nil
}

// simDrivers is every simulated node's driver fingerprint: the mock
// driver, healthy.
func simDrivers() map[string]*pb.DriverInfo {
	return map[string]*pb.DriverInfo{mock.Name: {
		Name: mock.Name, Detected: true, Healthy: true, HealthDescription: "healthy", Version: version.Version, Builtin: true,
		Attributes: map[string]string{"driver.mock": "true"},
	}}
}

// simDriverSet is the alloc runners' driver set: the mock driver only.
type simDriverSet struct{ d *countingDriver }

func (s simDriverSet) Driver(name string) (taskrunner.Driver, error) {
	if name != mock.Name {
		return nil, fmt.Errorf("nodesim: simulated nodes run only the %q driver, not %q", mock.Name, name)
	}
	return s.d, nil
}

// countingDriver is the mock driver, counting the tasks it started.
type countingDriver struct {
	*mock.Driver
	started atomic.Int64
	phases  *phaseLog
}

var _ taskrunner.Driver = (*countingDriver)(nil)

func (d *countingDriver) StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	h, err := d.Driver.StartTask(ctx, cfg)
	if err == nil {
		d.started.Add(1)
		d.phases.mark(phaseTaskStarted, cfg.GetAllocId(), time.Now())
	}
	return h, err
}
