package acceptance

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape is one read of an agent's /v1/metrics, parsed.
type scrape map[string]*dto.MetricFamily

func (a *agent) metrics() (scrape, error) {
	resp, err := httpClient.Get("http://" + a.httpAddr + "/v1/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s GET /v1/metrics: HTTP %d", a.name, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s /v1/metrics is not Prometheus text: %w", a.name, err)
	}
	return fams, nil
}

// value is the series of name with labels (a subset of its labels): a
// counter's or gauge's value, a histogram's sample count; ok false when
// there is no such series.
func (s scrape) value(name string, labels ...string) (v float64, ok bool) {
	f := s[name]
	for _, m := range f.GetMetric() {
		if !hasLabelPairs(m, labels) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func hasLabelPairs(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// metricWant is a check of one series: its value within [min, max].
type metricWant struct {
	name     string
	labels   []string
	min, max float64
}

func (s scrape) check(wants []metricWant) error {
	var bad []string
	for _, w := range wants {
		v, ok := s.value(w.name, w.labels...)
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s%v missing", w.name, w.labels))
		case v < w.min || v > w.max:
			bad = append(bad, fmt.Sprintf("%s%v = %v, want %v..%v", w.name, w.labels, v, w.min, w.max))
		}
	}
	if bad != nil {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}

func (s scrape) names() []string {
	var out []string
	for n := range s {
		if strings.HasPrefix(n, "berth_") {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

const many = 1e9

// TestMetricsDevAgent scrapes a dev agent whose job uses a volume of the
// built-in hostpath plugin: every storage, scheduling and heartbeat metric
// is there with values the run explains, before and after the job stops.
func TestMetricsDevAgent(t *testing.T) {
	a := startDevAgent(t)
	t.Cleanup(func() { stopAllJobs(t, a, "mw") })
	waitPluginSchedulable(t, a, "hostpath", 1, 1)

	// A create the plugin refuses (larger than its 1 TiB maximum): one
	// failed CreateVolume, counted by its code.
	big := filepath.Join(t.TempDir(), "big.hcl")
	if err := os.WriteFile(big, []byte(`
id           = "mbig"
plugin_id    = "hostpath"
capacity_min = "2TiB"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := a.cli("volume", "create", big); err == nil {
		t.Fatalf("creating a 2 TiB hostpath volume succeeded:\n%s", out)
	}

	createVolume(t, a, "mv1", "hostpath")
	node := waitNodeStatus(t, a, "ready", 10*time.Second)
	runJob(t, a, "mw", volumeUserJob("mw", "mv1", "", "echo hi > $BERTH_VOLUME_DATA/hello"))
	waitVolumeUser(t, a, "mw", "mv1", node.ID, nil)

	var s scrape
	eventually(t, 60*time.Second, "the metrics of a running volume user", func() (err error) {
		if s, err = a.metrics(); err != nil {
			return err
		}
		return s.check([]metricWant{
			{"berth_csi_plugin_instances_healthy", []string{"plugin_id", "hostpath", "type", "controller"}, 1, 1},
			{"berth_csi_plugin_instances_expected", []string{"plugin_id", "hostpath", "type", "controller"}, 1, 1},
			{"berth_csi_plugin_instances_healthy", []string{"plugin_id", "hostpath", "type", "node"}, 1, 1},
			{"berth_csi_plugin_instances_expected", []string{"plugin_id", "hostpath", "type", "node"}, 1, 1},
			{"berth_volume_claims", []string{"state", "in-use"}, 1, 1},
			{"berth_volume_claims", []string{"state", "reserved"}, 0, 0},
			{"berth_volume_claims", []string{"state", "releasing"}, 0, 0},
			{"berth_volume_attachments", []string{"state", "attached"}, 1, 1},
			{"berth_volume_attachments", []string{"state", "attaching"}, 0, 0},
			// In use since moments ago (the test's own minutes bound it).
			{"berth_volume_claim_state_max_age_seconds", []string{"state", "in-use"}, 1e-9, 600},
			{"berth_volume_claim_state_max_age_seconds", []string{"state", "reserved"}, 0, 0},
			{"berth_allocs", []string{"client_status", "running"}, 1, 1},
			{"berth_allocs", []string{"client_status", "failed"}, 0, 0},
			{"berth_csi_call_duration_seconds", []string{"method", "NodeStageVolume", "code", "OK"}, 1, 1},
			{"berth_csi_call_duration_seconds", []string{"method", "NodePublishVolume", "code", "OK"}, 1, 1},
			{"berth_csi_call_duration_seconds", []string{"method", "ControllerPublishVolume", "code", "OK"}, 1, 1},
			{"berth_csi_call_duration_seconds", []string{"method", "CreateVolume", "code", "OK"}, 1, 1},
			{"berth_csi_call_duration_seconds", []string{"method", "CreateVolume", "code", "OutOfRange"}, 1, 1},
			{"berth_csi_call_errors_total", []string{"method", "CreateVolume", "code", "OutOfRange"}, 1, 1},
			{"berth_csi_call_duration_seconds", []string{"method", "Probe", "code", "OK"}, 1, many},
			{"berth_volume_node_operation_duration_seconds", []string{"operation", "stage", "result", "ok"}, 1, 1},
			{"berth_volume_node_operation_duration_seconds", []string{"operation", "publish", "result", "ok"}, 1, 1},
			{"berth_volume_controller_operation_duration_seconds", []string{"operation", "attach", "result", "ok"}, 1, 1},
			{"berth_eval_duration_seconds", []string{"result", "ack"}, 1, many},
			{"berth_plan_apply_duration_seconds", []string{"result", "ok"}, 1, many},
			{"berth_heartbeats_received_total", nil, 1, many},
			{"berth_heartbeats_missed_total", nil, 0, 0},
			{"berth_volume_reaper_force_detached_claims_total", nil, 0, 0},
		})
	})
	t.Logf("metric names: %s", strings.Join(s.names(), " "))

	stopJob(t, a, "mw")
	eventually(t, 60*time.Second, "the metrics of the freed volume", func() (err error) {
		if s, err = a.metrics(); err != nil {
			return err
		}
		return s.check([]metricWant{
			{"berth_volume_claims", []string{"state", "in-use"}, 0, 0},
			{"berth_volume_claims", []string{"state", "node-detached"}, 0, 0},
			{"berth_volume_attachments", []string{"state", "attached"}, 0, 0},
			{"berth_volume_claim_state_max_age_seconds", []string{"state", "in-use"}, 0, 0},
			{"berth_allocs", []string{"client_status", "running"}, 0, 0},
			{"berth_csi_call_duration_seconds", []string{"method", "NodeUnpublishVolume", "code", "OK"}, 1, 1},
			{"berth_csi_call_duration_seconds", []string{"method", "NodeUnstageVolume", "code", "OK"}, 1, 1},
			{"berth_csi_call_duration_seconds", []string{"method", "ControllerUnpublishVolume", "code", "OK"}, 1, 1},
			{"berth_volume_node_operation_duration_seconds", []string{"operation", "unpublish", "result", "ok"}, 1, 1},
			{"berth_volume_node_operation_duration_seconds", []string{"operation", "unstage", "result", "ok"}, 1, 1},
			{"berth_volume_controller_operation_duration_seconds", []string{"operation", "detach", "result", "ok"}, 1, 1},
		})
	})
}
