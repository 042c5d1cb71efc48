package acceptance

import (
	"fmt"
	"testing"
	"time"
)

// stateGauges are the families read from the cluster's state, which only
// the leader serves; the first five are there however empty the cluster
// (the plugin families have a series per plugin, and it has none).
var stateGauges = []string{
	"berth_volume_claims", "berth_volume_claim_state_max_age_seconds", "berth_volume_attachments",
	"berth_allocs", "berth_nodes", "berth_csi_plugin_instances_healthy", "berth_csi_plugin_instances_expected",
}

// TestMetricsStateGaugesOnlyFromTheLeader scrapes three servers: the
// leader serves the cluster-state gauges, the followers none of them (so
// sum() across servers counts the cluster once), while every server
// serves its own process's metrics.
func TestMetricsStateGaugesOnlyFromTheLeader(t *testing.T) {
	servers, _ := startServers(t)
	eventually(t, 60*time.Second, "the state gauges on the leader alone", func() error {
		leader, err := agreedLeader(servers)
		if err != nil {
			return err
		}
		for _, s := range servers {
			sc, err := s.metrics()
			if err != nil {
				return err
			}
			if _, ok := sc["berth_heartbeats_missed_total"]; !ok {
				return fmt.Errorf("%s serves no berth_heartbeats_missed_total", s.name)
			}
			for i, name := range stateGauges {
				_, has := sc[name]
				switch {
				case s.rpcAddr == leader && !has && i < 5:
					return fmt.Errorf("%s (leader) serves no %s", s.name, name)
				case s.rpcAddr != leader && has:
					return fmt.Errorf("%s (follower) serves %s", s.name, name)
				}
			}
		}
		if again, err := agreedLeader(servers); err != nil || again != leader {
			return fmt.Errorf("leadership moved during the scrapes (%s, %v)", again, err)
		}
		return nil
	})
	leader, _ := agreedLeader(servers)
	for _, s := range servers {
		if s.rpcAddr != leader {
			continue
		}
		sc, err := s.metrics()
		if err != nil {
			t.Fatal(err)
		}
		if err := sc.check([]metricWant{
			{"berth_nodes", []string{"status", "ready"}, 0, 0},
			{"berth_volume_claims", []string{"state", "in-use"}, 0, 0},
			{"berth_allocs", []string{"client_status", "running"}, 0, 0},
		}); err != nil {
			t.Fatalf("%s (leader): %v", s.name, err)
		}
	}
}
