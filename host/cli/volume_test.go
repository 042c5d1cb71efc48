package cli

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// volumeRoutes serves the volume endpoints from f.volumes and
// f.snapshots, as the servers answer them: secrets redacted, deregister
// refused while claims remain unless forced.
func (f *fakeCluster) volumeRoutes(route func(string, func(*http.Request) (any, error))) {
	redact := func(v *pb.VolumeView) *pb.VolumeView {
		v = proto.CloneOf(v)
		for k := range v.GetVolume().GetSecrets() {
			v.Volume.Secrets[k] = "[REDACTED]"
		}
		return v
	}
	route("GET /v1/volumes", func(r *http.Request) (any, error) {
		if err := f.wait(r); err != nil {
			return nil, err
		}
		q := r.URL.Query()
		var keep []*pb.VolumeView
		for _, id := range sortedKeys(f.volumes) {
			v := f.volumes[id]
			onNode := q.Get("node_id") == "" ||
				slices.ContainsFunc(v.GetClaims(), func(c *pb.Claim) bool { return c.GetNodeId() == q.Get("node_id") }) ||
				slices.ContainsFunc(v.GetAttachments(), func(a *pb.Attachment) bool { return a.GetNodeId() == q.Get("node_id") })
			if id >= q.Get("next_token") && strings.HasPrefix(id, q.Get("prefix")) && onNode &&
				(q.Get("plugin_id") == "" || v.GetVolume().GetPluginId() == q.Get("plugin_id")) {
				keep = append(keep, redact(v))
			}
		}
		per, _ := strconv.Atoi(q.Get("per_page"))
		if per > 0 && len(keep) > per {
			return page[*pb.VolumeView]{keep[:per], keep[per].GetVolume().GetId()}, nil
		}
		return page[*pb.VolumeView]{items: keep}, nil
	})
	route("GET /v1/volume/csi/{id}", func(r *http.Request) (any, error) {
		if err := f.wait(r); err != nil {
			return nil, err
		}
		v := f.volumes[r.PathValue("id")]
		if v == nil {
			return nil, notFound("volume", r.PathValue("id"))
		}
		return redact(v), nil
	})
	register := func(create bool) func(r *http.Request) (any, error) {
		return func(r *http.Request) (any, error) {
			req := &pb.VolumeRegisterRequest{}
			if err := decodeReq(r, req); err != nil {
				return nil, err
			}
			v := req.GetVolume()
			if create {
				v.ExternalId = "ext-" + v.GetId()
			}
			f.index++
			f.volumes[v.GetId()] = &pb.VolumeView{Volume: v}
			return &pb.VolumeRegisterResponse{Volume: redact(f.volumes[v.GetId()]).GetVolume(),
				Warnings: []string{"plugin has no controller: capabilities not validated"}, Meta: &pb.WriteMeta{Index: f.index}}, nil
		}
	}
	route("PUT /v1/volume/csi/{id}", register(false))
	route("PUT /v1/volume/csi/{id}/create", register(true))
	route("DELETE /v1/volume/csi/{id}", func(r *http.Request) (any, error) {
		v := f.volumes[r.PathValue("id")]
		if v == nil {
			return nil, notFound("volume", r.PathValue("id"))
		}
		if len(v.GetClaims()) > 0 && r.URL.Query().Get("force") != "true" {
			return nil, &apiErr{400, "failed_precondition", `volume "` + r.PathValue("id") + `": volume in use: claimed by alloc ` + v.GetClaims()[0].GetAllocId()}
		}
		delete(f.volumes, r.PathValue("id"))
		f.index++
		return &pb.VolumeDeleteResponse{Meta: &pb.WriteMeta{Index: f.index}}, nil
	})
	route("DELETE /v1/volume/csi/{id}/delete", func(r *http.Request) (any, error) {
		delete(f.volumes, r.PathValue("id"))
		f.index++
		return &pb.VolumeDeleteResponse{Meta: &pb.WriteMeta{Index: f.index}}, nil
	})
	route("PUT /v1/volume/csi/{id}/expand", func(r *http.Request) (any, error) {
		req := &pb.VolumeExpandRequest{}
		if err := decodeReq(r, req); err != nil {
			return nil, err
		}
		if f.expandResp != nil {
			return f.expandResp, nil
		}
		return &pb.VolumeExpandResponse{CapacityBytes: req.GetCapacityMinBytes(), NodeExpansionRequired: true}, nil
	})
	route("PUT /v1/volumes/snapshot", func(r *http.Request) (any, error) {
		req := &pb.SnapshotCreateRequest{}
		if err := decodeReq(r, req); err != nil {
			return nil, err
		}
		s := &pb.Snapshot{Id: "snap-" + req.GetName(), VolumeId: req.GetVolumeId(), SizeBytes: 1 << 30, CreatedAt: 1_800_000_000_000_000_000, ReadyToUse: true}
		f.snapshots = append(f.snapshots, s)
		return s, nil
	})
	// The snapshot list pages one at a time with tokens that do not sort,
	// as a plugin's may: "z" first, then "a" (unless the test sets others).
	f.snapshotTokens = []string{"", "z", "a", "m"}
	route("GET /v1/volumes/snapshot", func(r *http.Request) (any, error) {
		tokens := f.snapshotTokens
		i := slices.Index(tokens, r.URL.Query().Get("next_token"))
		if i < 0 || i >= len(f.snapshots) {
			return nil, &apiErr{400, "invalid_argument", "bad token"}
		}
		p := page[*pb.Snapshot]{items: f.snapshots[i : i+1]}
		if i+1 < len(f.snapshots) {
			p.next = tokens[i+1]
		}
		return p, nil
	})
	route("DELETE /v1/volumes/snapshot", func(r *http.Request) (any, error) { return &pb.SnapshotDeleteResponse{}, nil })
}

const registerHCL = `
id          = "data"
plugin_id   = "ebs"
external_id = "vol-0abc"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
secrets { token = "hunter2" }
`

const createHCL = `
id           = "new"
plugin_id    = "ebs"
capacity_min = "10GiB"
capability {
  access_mode     = "multi-node-reader-only"
  attachment_mode = "block-device"
}
`

func writeVolumeFile(t *testing.T, name, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVolumeRegisterAndCreateFromFiles: register and create parse the
// file, send the volume (secrets included: the plugin needs them) and
// print the outcome with the servers' warnings; a bad file is refused
// with its position before anything is sent.
func TestVolumeRegisterAndCreateFromFiles(t *testing.T) {
	f := newFakeCluster(t)
	out := wantOut(t, []string{"volume", "register", "-address", f.url, writeVolumeFile(t, "data.hcl", registerHCL)}, 0,
		"Volume \"data\" registered\n", "Warnings:\n  * plugin has no controller: capabilities not validated\n")
	if strings.Contains(out, "hunter2") {
		t.Fatalf("register printed a secret:\n%s", out)
	}
	sent := &pb.VolumeRegisterRequest{}
	if err := apijson.Unmarshal(f.body("PUT /v1/volume/csi/data"), sent); err != nil || sent.GetVolume().GetSecrets()["token"] != "hunter2" ||
		sent.GetVolume().GetExternalId() != "vol-0abc" || sent.GetVolume().GetName() != "data" {
		t.Fatalf("register sent %s (%v)", f.body("PUT /v1/volume/csi/data"), err)
	}

	wantOut(t, []string{"volume", "create", "-address", f.url, writeVolumeFile(t, "new.hcl", createHCL)}, 0,
		"Created external volume ext-new with ID new\n", "Warnings:\n  * plugin has no controller: capabilities not validated\n")
	created := &pb.VolumeCreateRequest{}
	if err := apijson.Unmarshal(f.body("PUT /v1/volume/csi/new/create"), created); err != nil || created.GetVolume().GetRequestedCapacityMinBytes() != 10<<30 {
		t.Fatalf("create sent %s (%v)", f.body("PUT /v1/volume/csi/new/create"), err)
	}

	n := len(f.reqs())
	bad := writeVolumeFile(t, "bad.hcl", strings.Replace(registerHCL, `"single-node-writer"`, `"single-node-writter"`, 1))
	wantOut(t, []string{"volume", "register", "-address", f.url, bad}, 1, "bad.hcl:6", "capability[0].access_mode", `"single-node-writer"`)
	// A register file lacks what a create needs and the other way round.
	wantOut(t, []string{"volume", "create", "-address", f.url, writeVolumeFile(t, "d.hcl", registerHCL)}, 1, "external_id")
	wantOut(t, []string{"volume", "register", "-address", f.url}, exitUsage, "volume register takes exactly one volume file")
	if got := len(f.reqs()); got != n {
		t.Fatalf("refused files still sent %d requests: %v", got-n, f.reqs()[n:])
	}
}

// failingView is volume "data" with an alloc's claim stuck on a failing
// publish and an operator's ready claim, both on pluginNode.
func failingView() *pb.VolumeView {
	return &pb.VolumeView{
		Volume: &pb.Volume{Id: "data", Name: "database", PluginId: "ebs", Provider: "ebs.csi.aws.com", ProviderVersion: "1.29.1",
			ExternalId: "vol-0abc", CapacityBytes: 10 << 30, Schedulable: true, ControllerRequired: true,
			Secrets: map[string]string{"token": "hunter2"},
			Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY,
				AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}},
			MountOptions:       &pb.MountOptions{FsType: "ext4", MountFlags: []string{"noatime"}},
			AccessibleTopology: []*pb.Topology{{Segments: map[string]string{"zone": "z1", "rack": "r1"}}}},
		Claims: []*pb.Claim{
			{Id: "c1c1c1c1-0000-4000-8000-000000000001", VolumeId: "data", AllocId: allocA, NodeId: pluginNode, Mode: pb.ClaimMode_CLAIM_MODE_READ,
				AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY, State: pb.ClaimState_CLAIM_STATE_RESERVED,
				LastError: &pb.VolumeError{Message: "controller publish timed out", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN, Code: pb.GrpcCode_GRPC_CODE_DEADLINE_EXCEEDED},
				Attempts:  3, NextRetryAt: 1_800_000_000_000_000_000},
			{Id: "c2c2c2c2-0000-4000-8000-000000000002", VolumeId: "data", Operator: true, NodeId: nodeB, Mode: pb.ClaimMode_CLAIM_MODE_READ,
				AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY, State: pb.ClaimState_CLAIM_STATE_READY},
		},
		Attachments: []*pb.Attachment{
			{VolumeId: "data", NodeId: pluginNode, PluginId: "ebs", State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHING, ControllerNodeId: nodeA,
				LastError: &pb.VolumeError{Message: "controller publish timed out", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN, Code: pb.GrpcCode_GRPC_CODE_DEADLINE_EXCEEDED},
				Attempts:  3, NextRetryAt: 1_800_000_000_000_000_000},
			{VolumeId: "data", NodeId: nodeB, PluginId: "ebs", State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED, ControllerNodeId: nodeA},
		},
	}
}

// TestVolumeStatusListDetailAndVerbose: the list shows each volume's
// plugin, schedulability, access mode in use and claims, filtered by
// plugin or node (a node prefix resolved); one volume shows its claims and
// attachments, and -verbose each failing step on a line naming the
// volume, the alloc and the node, with attempts and the next retry. No
// output carries a secret's value.
func TestVolumeStatusListDetailAndVerbose(t *testing.T) {
	f := newFakeCluster(t)
	wantOut(t, []string{"volume", "status", "-address", f.url}, 0, "No volumes")
	f.volumes["data"] = failingView()
	f.volumes["logs"] = &pb.VolumeView{Volume: &pb.Volume{Id: "logs", Name: "logs", PluginId: "nfs"}}
	f.nodes[pluginNode] = &pb.Node{Id: pluginNode}

	wantOut(t, []string{"volume", "status", "-address", f.url}, 0,
		"Container Storage Interface\nID    Name      Plugin ID  Schedulable  Access Mode             Claims\n"+
			"data  database  ebs        true         multi-node-reader-only  2\n"+
			"logs  logs      nfs        false        <none>                  0\n",
		"2 claims or attachments have an error; -verbose shows them")
	// -verbose on the list shows every failing step of every volume.
	wantOut(t, []string{"volume", "status", "-address", f.url, "-verbose"}, 0,
		"Errors\n"+`volume "data", claim c1c1c1c1-0000-4000-8000-000000000001 of alloc `+allocA+" on node "+pluginNode+": controller publish timed out",
		`volume "data", attachment to node `+pluginNode+" (attaching)")
	wantOut(t, []string{"volume", "status", "-address", f.url, "-plugin", "nfs"}, 0, "logs  logs")
	if reqs := f.reqs(); reqs[len(reqs)-1] != "GET /v1/volumes?per_page=1000&plugin_id=nfs" {
		t.Fatalf("-plugin sent %q", reqs[len(reqs)-1])
	}
	out := wantOut(t, []string{"volume", "status", "-address", f.url, "-node", "7e1a"}, 0, "data  database")
	if strings.Contains(out, "logs") {
		t.Fatalf("-node listed a volume not on the node:\n%s", out)
	}
	// The CSI volumes on the node, then its dynamic host volumes.
	if reqs := f.reqs(); reqs[len(reqs)-2] != "GET /v1/volumes?node_id="+pluginNode+"&per_page=1000" ||
		reqs[len(reqs)-1] != "GET /v1/volumes/host?node_id="+pluginNode+"&per_page=1000" {
		t.Fatalf("-node sent %q", reqs[len(reqs)-2:])
	}
	// A node no longer registered is taken by its exact ID.
	wantOut(t, []string{"volume", "status", "-address", f.url, "-node", nodeB}, 0, "data  database")
	wantOut(t, []string{"volume", "status", "-address", f.url, "-node", "7e1a", "data"}, exitUsage, "-node and -plugin filter the list")

	out = wantOut(t, []string{"volume", "status", "-address", f.url, "da"}, 0,
		"ID                   = data\n", "Provider             = ebs.csi.aws.com\n", "Capacity             = 10.0 GiB\n",
		"Access Mode          = multi-node-reader-only\n", "Mount Options        = fs_type: ext4 flags: noatime\n",
		"Topology             = rack=r1,zone=z1\n",
		"Claims\nID        Claimant        Node ID   Mode  State     Attempts\n"+
			"c1c1c1c1  alloc a1a1a1a1  7e1a2b3c  read  reserved  3\n"+
			"c2c2c2c2  operator        n2n2n2n2  read  ready     0\n",
		"Attachments\nNode ID   State      Controller Node  Attempts\n7e1a2b3c  attaching  n1n1n1n1         3\n",
		"2 claims or attachments have an error; -verbose shows them")
	if strings.Contains(out, "Errors") || strings.Contains(out, "hunter2") {
		t.Fatalf("volume status without -verbose:\n%s", out)
	}
	out = wantOut(t, []string{"volume", "status", "-address", f.url, "-verbose", "data"}, 0,
		"Errors\n"+
			`volume "data", claim c1c1c1c1-0000-4000-8000-000000000001 of alloc `+allocA+" on node "+pluginNode+
			": controller publish timed out (uncertain, DeadlineExceeded); 3 attempts, next retry 2027-01-15T08:00:00Z\n"+
			`volume "data", attachment to node `+pluginNode+" (attaching): controller publish timed out (uncertain, DeadlineExceeded); 3 attempts, next retry 2027-01-15T08:00:00Z\n")
	if strings.Contains(out, "hunter2") {
		t.Fatalf("-verbose printed a secret:\n%s", out)
	}

	out = wantOut(t, []string{"volume", "status", "-address", f.url, "-json", "data"}, 0)
	var v struct {
		Volume struct {
			ID      string            `json:"id"`
			Secrets map[string]string `json:"secrets"`
		} `json:"volume"`
		Claims []struct {
			AllocID     string `json:"alloc_id"`
			Attempts    int    `json:"attempts"`
			NextRetryAt string `json:"next_retry_at"`
			LastError   struct {
				Message string `json:"message"`
			} `json:"last_error"`
		} `json:"claims"`
		Attachments []struct {
			NodeID string `json:"node_id"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Volume.ID != "data" || len(v.Claims) != 2 || v.Claims[0].Attempts != 3 ||
		v.Claims[0].LastError.Message != "controller publish timed out" || v.Claims[0].NextRetryAt == "" || len(v.Attachments) != 2 ||
		v.Volume.Secrets["token"] != "[REDACTED]" || strings.Contains(out, "hunter2") {
		t.Fatalf("volume status -json: %v\n%s", err, out)
	}
	out = wantOut(t, []string{"volume", "status", "-address", f.url, "-json"}, 0)
	var list []json.RawMessage
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 || strings.Contains(out, "hunter2") {
		t.Fatalf("volume status -json list: %v\n%s", err, out)
	}
	wantOut(t, []string{"volume", "status", "-address", f.url, "zzz"}, 1, `no volume with ID or prefix "zzz"`)
	wantOut(t, []string{"volume", "status", "-address", f.url, "-type", "nfs"}, exitUsage, `-type="nfs": "csi" or "host" (without -type, both)`)
}

// TestVolumeDeregisterDeleteAndExpand: deregister shows the servers'
// refusal naming the claim and sends force with -force; delete sends its
// -secret values whole (a comma in one kept); expand reads sizes with
// units and refuses a maximum under the minimum before sending.
func TestVolumeDeregisterDeleteAndExpand(t *testing.T) {
	f := newFakeCluster(t)
	f.volumes["data"] = failingView()
	f.volumes["old"] = &pb.VolumeView{Volume: &pb.Volume{Id: "old", PluginId: "ebs"}}

	wantOut(t, []string{"volume", "deregister", "-address", f.url, "data"}, 1, `volume "data": volume in use: claimed by alloc `+allocA)
	wantOut(t, []string{"volume", "deregister", "-address", f.url, "-force", "data"}, 0, `Volume "data" deregistered`)
	if reqs := f.reqs(); reqs[len(reqs)-1] != "DELETE /v1/volume/csi/data?force=true" {
		t.Fatalf("-force sent %q", reqs[len(reqs)-1])
	}

	wantOut(t, []string{"volume", "delete", "-address", f.url, "-secret", "token=a,b", "-secret", "region=eu", "ol"}, 0, `Successfully deleted volume "old"`)
	del := &pb.VolumeDeleteRequest{}
	if err := apijson.Unmarshal(f.body("DELETE /v1/volume/csi/old/delete"), del); err != nil ||
		del.GetSecrets()["token"] != "a,b" || del.GetSecrets()["region"] != "eu" {
		t.Fatalf("delete sent %s (%v)", f.body("DELETE /v1/volume/csi/old/delete"), err)
	}
	_, errOut := wantOutErr(t, []string{"volume", "delete", "-address", f.url, "-secret", "a=1", "-secret", "hunter2", "old"}, exitUsage, "-secret number 2 is not key=value")
	if strings.Contains(errOut, "hunter2") {
		t.Fatalf("a malformed -secret is echoed: %s", errOut)
	}

	f.volumes["data"] = failingView()
	wantOut(t, []string{"volume", "expand", "-address", f.url, "-capacity-min", "20GiB", "-secret", "k=v", "data"}, 0,
		`Volume "data" expanded to 20.0 GiB`, "no node holds the volume")
	exp := &pb.VolumeExpandRequest{}
	if err := apijson.Unmarshal(f.body("PUT /v1/volume/csi/data/expand"), exp); err != nil || exp.GetCapacityMinBytes() != 20<<30 || exp.GetSecrets()["k"] != "v" {
		t.Fatalf("expand sent %s (%v)", f.body("PUT /v1/volume/csi/data/expand"), err)
	}
	n := len(f.reqs())
	wantOut(t, []string{"volume", "expand", "-address", f.url, "-capacity-min", "2GB", "-capacity-max", "1GB", "data"}, exitUsage, "-capacity-max 1GB is less than -capacity-min 2GB")
	wantOut(t, []string{"volume", "expand", "-address", f.url, "-capacity-min", "lots", "data"}, exitUsage, "-capacity-min")
	wantOut(t, []string{"volume", "expand", "-address", f.url, "data"}, exitUsage, "needs -capacity-min")
	if got := len(f.reqs()); got != n {
		t.Fatalf("refused expands sent %v", f.reqs()[n:])
	}
}

// TestVolumeSnapshotCommands: create prints the snapshot; list follows
// the plugin's page tokens, which need not sort, and sends the secrets in
// the header; delete names plugin and snapshot.
func TestVolumeSnapshotCommands(t *testing.T) {
	f := newFakeCluster(t)
	f.volumes["data"] = failingView()
	wantOut(t, []string{"volume", "snapshot", "create", "-address", f.url, "-parameter", "tier=cold", "data", "nightly"}, 0,
		"Snapshot ID   Volume ID  External Volume ID  Size     Created               Ready\n"+
			"snap-nightly  data       -                   1.0 GiB  2027-01-15T08:00:00Z  true\n")
	sc := &pb.SnapshotCreateRequest{}
	if err := apijson.Unmarshal(f.body("PUT /v1/volumes/snapshot"), sc); err != nil || sc.GetParameters()["tier"] != "cold" || sc.GetName() != "nightly" {
		t.Fatalf("snapshot create sent %s (%v)", f.body("PUT /v1/volumes/snapshot"), err)
	}
	wantOut(t, []string{"volume", "snapshot", "create", "-address", f.url, "data", "weekly"}, 0, "snap-weekly")
	wantOut(t, []string{"volume", "snapshot", "create", "-address", f.url, "data", "monthly"}, 0, "snap-monthly")

	out := wantOut(t, []string{"volume", "snapshot", "list", "-address", f.url, "-plugin", "ebs", "-volume", "data"}, 0, "snap-nightly", "snap-weekly", "snap-monthly")
	if strings.Count(out, "snap-") != 3 {
		t.Fatalf("snapshot list:\n%s", out)
	}
	reqs := f.reqs()
	if got := reqs[len(reqs)-3:]; got[0] != "GET /v1/volumes/snapshot?plugin_id=ebs&volume_id=data" ||
		got[1] != "GET /v1/volumes/snapshot?next_token=z&plugin_id=ebs&volume_id=data" || got[2] != "GET /v1/volumes/snapshot?next_token=a&plugin_id=ebs&volume_id=data" {
		t.Fatalf("snapshot list sent %q", got)
	}
	wantOut(t, []string{"volume", "snapshot", "list", "-address", f.url}, exitUsage, "snapshot list needs -plugin or -volume")
	wantOut(t, []string{"volume", "snapshot", "list", "-address", f.url, "-volume", "data"}, 0, "snap-monthly")
	if reqs := f.reqs(); reqs[len(reqs)-1] != "GET /v1/volumes/snapshot?next_token=a&volume_id=data" {
		t.Fatalf("snapshot list -volume sent %q", reqs[len(reqs)-1])
	}
	// A plugin that hands back a token it gave before would loop forever.
	f.mu.Lock()
	f.snapshotTokens = []string{"", "z", "z"}
	f.mu.Unlock()
	wantOut(t, []string{"volume", "snapshot", "list", "-address", f.url, "-plugin", "ebs"}, 1,
		`plugin "ebs": its snapshot list handed back page token "z" twice; stopped after 2 snapshots`)

	wantOut(t, []string{"volume", "snapshot", "delete", "-address", f.url, "ebs", "snap-nightly"}, 0, `Deleted snapshot "snap-nightly" of plugin "ebs"`)
	if reqs := f.reqs(); reqs[len(reqs)-1] != "DELETE /v1/volumes/snapshot?plugin_id=ebs&snapshot_id=snap-nightly" {
		t.Fatalf("snapshot delete sent %q", reqs[len(reqs)-1])
	}
}

// TestNodeStatusListsItsVolumes: node status shows the volumes claimed or
// attached on the node with their plugin and provider, the node's claims
// and its attachment's state; a node without any shows no section.
func TestNodeStatusListsItsVolumes(t *testing.T) {
	f := newFakeCluster(t)
	f.nodes[pluginNode] = &pb.Node{Id: pluginNode, Name: "client-2", Status: pb.NodeStatus_NODE_STATUS_READY}
	f.nodes[nodeA] = &pb.Node{Id: nodeA, Name: "client-1", Status: pb.NodeStatus_NODE_STATUS_READY}
	f.volumes["data"] = failingView()
	f.volumes["logs"] = &pb.VolumeView{Volume: &pb.Volume{Id: "logs", Name: "logs", PluginId: "nfs"}}
	wantOut(t, []string{"node", "status", "-address", f.url, "7e1a"}, 0,
		"CSI Volumes\nID    Name      Plugin ID  Provider         Schedulable  Claims Here  Attachment\n"+
			"data  database  ebs        ebs.csi.aws.com  true         1            attaching\n")
	if out := wantOut(t, []string{"node", "status", "-address", f.url, "n1n1"}, 0); strings.Contains(out, "CSI Volumes") {
		t.Fatalf("a node without volumes shows a volume section:\n%s", out)
	}
}
