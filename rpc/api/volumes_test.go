package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// TestVolumeMethodsSendTheirRequests checks each Volumes method's HTTP
// method, path (IDs escaped once), query and body, and that replies
// decode.
func TestVolumeMethodsSendTheirRequests(t *testing.T) {
	rec, c := newRecorder(t)
	ctx := context.Background()
	const esc = "team%2Fdata%201"

	rec.reply["GET /v1/volumes"] = `[{"volume": {"id": "a", "plugin_id": "ebs"}, "claims": [{"id": "c1", "alloc_id": "x", "attempts": 2}], "attachments": []}]`
	list, meta, err := c.Volumes().List(ctx, &QueryOptions{PerPage: 5, Params: map[string]string{"plugin_id": "ebs", "node_id": "n1"}})
	if err != nil || len(list) != 1 || list[0].GetClaims()[0].GetAttempts() != 2 || meta.LastIndex != 7 {
		t.Fatalf("List = %v %v %v", list, meta, err)
	}
	if got, want := rec.last(), "GET /v1/volumes?node_id=n1&per_page=5&plugin_id=ebs"; got != want {
		t.Fatalf("sent %q, want %q", got, want)
	}

	rec.reply["GET /v1/volume/csi/"+esc] = `{"volume": {"id": "team/data 1"}, "claims": [], "attachments": [{"node_id": "n1", "state": "attached"}]}`
	v, _, err := c.Volumes().Info(ctx, "team/data 1", nil)
	if err != nil || v.GetVolume().GetId() != "team/data 1" || v.GetAttachments()[0].GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHED {
		t.Fatalf("Info = %v, %v", v, err)
	}
	rec.reply["GET /v1/volume/csi/"+esc+"/claims"] = `[{"id": "c1", "operator": true}]`
	claims, _, err := c.Volumes().Claims(ctx, "team/data 1", nil)
	if err != nil || len(claims) != 1 || !claims[0].GetOperator() {
		t.Fatalf("Claims = %v, %v", claims, err)
	}

	vol := &pb.Volume{Id: "team/data 1", PluginId: "ebs"}
	rec.reply["PUT /v1/volume/csi/"+esc] = `{"volume": {"id": "team/data 1"}, "warnings": ["not validated"], "meta": {"index": 9}}`
	reg, err := c.Volumes().Register(ctx, vol)
	if err != nil || reg.GetWarnings()[0] != "not validated" || reg.GetMeta().GetIndex() != 9 {
		t.Fatalf("Register = %v, %v", reg, err)
	}
	// Compact, without the fields at their defaults: a job within
	// server.job_max_size must fit the agent's body limit, which the
	// indented rendering with every field can be ten times over.
	if b, want := rec.body["PUT /v1/volume/csi/"+esc], `{"volume":{"id":"team/data 1","plugin_id":"ebs"}}`; b != want {
		t.Fatalf("register body %s, want %s", b, want)
	}
	if _, err := c.Volumes().Create(ctx, vol); err != nil || rec.last() != "PUT /v1/volume/csi/"+esc+"/create" {
		t.Fatalf("Create sent %q, %v", rec.last(), err)
	}
	if _, err := c.Volumes().Register(ctx, &pb.Volume{}); err == nil {
		t.Fatal("Register of a volume without an ID was sent")
	}

	if _, err := c.Volumes().Deregister(ctx, "team/data 1", true); err != nil || rec.last() != "DELETE /v1/volume/csi/"+esc+"?force=true" {
		t.Fatalf("Deregister sent %q, %v", rec.last(), err)
	}
	if _, err := c.Volumes().Deregister(ctx, "a", false); err != nil || rec.last() != "DELETE /v1/volume/csi/a" {
		t.Fatalf("Deregister sent %q, %v", rec.last(), err)
	}
	if _, err := c.Volumes().Delete(ctx, "a", map[string]string{"k": "v"}); err != nil || !strings.Contains(rec.body["DELETE /v1/volume/csi/a/delete"], `"k":"v"`) {
		t.Fatalf("Delete body %q, %v", rec.body["DELETE /v1/volume/csi/a/delete"], err)
	}
	if _, err := c.Volumes().Delete(ctx, "a", nil); err != nil || rec.body["DELETE /v1/volume/csi/a/delete"] != "" {
		t.Fatalf("Delete without secrets sent a body %q, %v", rec.body["DELETE /v1/volume/csi/a/delete"], err)
	}
	rec.reply["PUT /v1/volume/csi/a/expand"] = `{"capacity_bytes": 10737418240, "node_expansion_required": true}`
	exp, err := c.Volumes().Expand(ctx, &pb.VolumeExpandRequest{VolumeId: "a", CapacityMinBytes: 10 << 30})
	if err != nil || exp.GetCapacityBytes() != 10<<30 || !strings.Contains(rec.body["PUT /v1/volume/csi/a/expand"], `"capacity_min_bytes":10737418240`) {
		t.Fatalf("Expand = %v, %v; body %s", exp, err, rec.body["PUT /v1/volume/csi/a/expand"])
	}
	rec.reply["PUT /v1/volumes/snapshot"] = `{"id": "snap-1", "volume_id": "a", "ready_to_use": true}`
	snap, err := c.Volumes().CreateSnapshot(ctx, &pb.SnapshotCreateRequest{VolumeId: "a", Name: "nightly"})
	if err != nil || snap.GetId() != "snap-1" || !snap.GetReadyToUse() || !strings.Contains(rec.body["PUT /v1/volumes/snapshot"], `"name":"nightly"`) {
		t.Fatalf("CreateSnapshot = %v, %v", snap, err)
	}
}

// TestSnapshotSecretsTravelInTheHeader: list and delete, which have no
// body, send secrets in X-Berth-CSI-Secrets, keys sorted; secrets the
// header cannot carry are refused before anything is sent, naming the key
// and not the value.
func TestSnapshotSecretsTravelInTheHeader(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get(HeaderCSISecrets))
		mu.Unlock()
		if r.Method == http.MethodGet {
			w.Header().Set("X-Berth-NextToken", "opaque")
			_, _ = w.Write([]byte(`[{"id": "snap-1"}]`))
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	snaps, meta, err := c.Volumes().Snapshots(ctx, "ebs", map[string]string{"b": "2", "a": "1"}, &QueryOptions{NextToken: "t0"})
	if err != nil || len(snaps) != 1 || meta.NextToken != "opaque" {
		t.Fatalf("Snapshots = %v %v %v", snaps, meta, err)
	}
	if err := c.Volumes().DeleteSnapshot(ctx, "ebs", "snap 1", map[string]string{"a": "1"}); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Volumes().Snapshots(ctx, "ebs", map[string]string{"token": "x,hunter2"}, nil)
	if !errors.Is(err, ErrSecretsHeader) || !strings.Contains(err.Error(), `"token"`) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("a value with a comma: %v", err)
	}
	if err := c.Volumes().DeleteSnapshot(ctx, "ebs", "s", map[string]string{"a=b": "1"}); !errors.Is(err, ErrSecretsHeader) {
		t.Fatalf("a key with '=': %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"GET /v1/volumes/snapshot?next_token=t0&plugin_id=ebs a=1,b=2", "DELETE /v1/volumes/snapshot?plugin_id=ebs&snapshot_id=snap+1 a=1"}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("sent:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}
