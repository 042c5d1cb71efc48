package agent

import (
	"fmt"
	"net/http"
	"time"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/host/server/nodes"
	"berth.dev/berth/host/server/volumeloops"
	"berth.dev/berth/internal/promtext"
	"berth.dev/berth/rpc/pb"
)

// The gauges computed from the cluster's state at each scrape: claims,
// attachments, allocs, CSI plugins, time in claim state and nodes. Only
// the leader emits them (a follower's scrape, and a client agent's, has
// none of these series), as Nomad emits its job and eval summaries: every
// server holds the same replicated state, so one series per cluster keeps
// sum() across servers from counting it once per server, and the leader's
// is the freshest (a follower may lag it). Scrape every server; the
// series follow leadership. Label values are bounded: states and statuses
// are enum words; plugin_id is a CSI plugin's ID, of which a cluster has a
// few, so it is a label; no volume, claim, alloc or node ID is.
// The state gauges' families: name, help and label names.
type gaugeFamily struct {
	name, help string
	labels     []string
}

var (
	pluginHealthyGauge = gaugeFamily{"berth_csi_plugin_instances_healthy",
		"Healthy instances of a CSI plugin, by plugin ID and type (controller or node).", []string{"plugin_id", "type"}}
	pluginExpectedGauge = gaugeFamily{"berth_csi_plugin_instances_expected",
		"Expected instances of a CSI plugin, by plugin ID and type (controller or node).", []string{"plugin_id", "type"}}
	claimsGauge = gaugeFamily{"berth_volume_claims",
		"Volume claims by state.", []string{"state"}}
	claimAgeGauge = gaugeFamily{"berth_volume_claim_state_max_age_seconds",
		"The longest time a claim in the state has been in it (0 when none is); from state_entered_at, or modified_at for claims last moved before every server ran 0.1.0-dev.4.",
		[]string{"state"}}
	attachmentsGauge = gaugeFamily{"berth_volume_attachments",
		"Volume attachments (controller publishes) by state.", []string{"state"}}
	allocsGauge = gaugeFamily{"berth_allocs",
		"Allocations by client status (terminal ones until they are collected).", []string{"client_status"}}
	nodesGauge = gaugeFamily{"berth_nodes",
		"Client nodes by status.", []string{"status"}}
)

// add adds one series of the family to g.
func (f gaugeFamily) add(g *promtext.Gathering, v float64, labelValues ...string) {
	promtext.Gauge(g, f.name, f.help, v, f.labels, labelValues...)
}

// clusterState is what the state gauges read.
type clusterState interface {
	StorageStats() (*fsm.StorageStats, error)
	NodeCountsByStatus() (map[pb.NodeStatus]int, error)
}

// stateCollector reads the server's state at Collect, while leader says
// this server leads.
type stateCollector struct {
	state  clusterState
	leader func() bool
	now    func() time.Time
}

// Collect emits every known state, zero included, so a series does not
// vanish when its last claim leaves the state; nothing on a follower.
func (c stateCollector) Collect(g *promtext.Gathering) {
	if !c.leader() {
		return
	}
	s, err := c.state.StorageStats()
	if err != nil {
		g.Fail(fmt.Errorf("error collecting metric %s: %w", claimsGauge.name, err))
		return
	}
	nodes, err := c.state.NodeCountsByStatus()
	if err != nil {
		g.Fail(fmt.Errorf("error collecting metric %s: %w", nodesGauge.name, err))
		return
	}
	for _, st := range []pb.NodeStatus{pb.NodeStatus_NODE_STATUS_READY, pb.NodeStatus_NODE_STATUS_DOWN} {
		nodesGauge.add(g, float64(nodes[st]), pb.EnumWord(st))
	}
	now := c.now().UnixNano()
	for st := pb.ClaimState_CLAIM_STATE_RESERVED; st < pb.ClaimState_CLAIM_STATE_FREED; st++ {
		word := pb.EnumWord(st)
		claimsGauge.add(g, float64(s.Claims[st]), word)
		age := 0.0
		if oldest := s.OldestClaim[st]; oldest > 0 && now > oldest {
			age = time.Duration(now - oldest).Seconds()
		}
		claimAgeGauge.add(g, age, word)
	}
	for st := pb.AttachmentState_ATTACHMENT_STATE_ATTACHING; st < pb.AttachmentState_ATTACHMENT_STATE_DETACHED; st++ {
		attachmentsGauge.add(g, float64(s.Attachments[st]), pb.EnumWord(st))
	}
	for st := pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING; int(st) < len(s.Allocs); st++ {
		allocsGauge.add(g, float64(s.Allocs[st]), pb.EnumWord(st))
	}
	for _, p := range s.Plugins {
		pluginHealthyGauge.add(g, float64(p.ControllersHealthy), p.ID, "controller")
		pluginExpectedGauge.add(g, float64(p.ControllersExpected), p.ID, "controller")
		pluginHealthyGauge.add(g, float64(p.NodesHealthy), p.ID, "node")
		pluginExpectedGauge.add(g, float64(p.NodesExpected), p.ID, "node")
	}
}

// storageMetrics are the process-wide collectors of the packages that time
// storage, scheduling and heartbeats, registered once with the registry.
func storageMetrics() []promtext.Collector {
	var cs []promtext.Collector
	for _, m := range [][]promtext.Collector{csi.Metrics(), volumemanager.Metrics(), volumeloops.Metrics(), evals.Metrics(), nodes.Metrics(), endpoints.NodeIdentityMetrics()} {
		cs = append(cs, m...)
	}
	return cs
}

// withStateGauges serves the process-wide registry together with the
// gauges read from this server's state while it leads (several agents,
// in tests, share the process's registry; each serves its own state).
func withStateGauges(state *fsm.StateStore, leader func() bool) http.Handler {
	return promtext.Handler(metricsRegistry, stateCollector{state: state, leader: leader, now: time.Now})
}
