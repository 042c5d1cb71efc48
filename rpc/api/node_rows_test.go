package api

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// rowOf is what a NodeRow must read of n, from the message's getters.
func rowOf(n *pb.Node) (id, name, status, eligibility string, drain bool, healthy []string, addr, version string) {
	for d, info := range n.GetDrivers() {
		if info.GetHealthy() {
			healthy = append(healthy, d)
		}
	}
	slices.Sort(healthy)
	return n.GetId(), n.GetName(), pb.EnumWord(n.GetStatus()), pb.EnumWord(n.GetEligibility()), n.GetDrain() != nil,
		healthy, n.GetHttpAddr(), n.GetFingerprint().GetBerthVersion()
}

// NodeRow mirrors eight fields of pb.Node by their API names: it must read
// from apijson's encoding of a node (what the agent writes) exactly what
// the message's getters hold, for every state of those fields, or the
// node table would show an empty column after a rename in the .proto.
func TestNodeRowsReadWhatTheAPIWrites(t *testing.T) {
	nodes := []*pb.Node{
		{
			Id: "5d0f0000-0000-4000-8000-000000000001", Name: "client-1", Status: pb.NodeStatus_NODE_STATUS_READY,
			Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE, HttpAddr: "10.0.0.1:7646",
			Fingerprint: &pb.NodeFingerprint{Hostname: "h1", BerthVersion: "0.1.0-dev.4", Attributes: map[string]string{"a": "b"}},
			Drivers: map[string]*pb.DriverInfo{
				"exec":     {Name: "exec", Detected: true, Healthy: true},
				"raw_exec": {Name: "raw_exec", Detected: true, Healthy: true, Attributes: map[string]string{"x": "y"}},
				"docker":   {Name: "docker", Detected: true, Healthy: false, HealthDescription: "no socket"},
			},
		},
		{
			Id: "5d0f0000-0000-4000-8000-000000000002", Name: "client-2", Status: pb.NodeStatus_NODE_STATUS_DOWN,
			Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE,
			Drain:       &pb.DrainStrategy{DeadlineMs: -1},
		},
		// A newer server's values this version does not know: apijson
		// writes the number, pb.EnumWord prints it.
		{Id: "5d0f0000-0000-4000-8000-000000000003", Status: pb.NodeStatus(97), Eligibility: pb.NodeEligibility(98)},
		{},
	}
	b, err := apijson.MarshalList(nodes)
	if err != nil {
		t.Fatal(err)
	}
	var rows []NodeRow
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	if len(rows) != len(nodes) {
		t.Fatalf("%d rows from %d nodes", len(rows), len(nodes))
	}
	for i, n := range nodes {
		r := rows[i]
		var healthy []string
		for d, info := range r.Drivers {
			if info.Healthy {
				healthy = append(healthy, d)
			}
		}
		slices.Sort(healthy)
		id, name, status, elig, drain, wantHealthy, addr, version := rowOf(n)
		if r.ID != id || r.Name != name || string(r.Status) != status || string(r.Eligibility) != elig || bool(r.Draining) != drain ||
			!slices.Equal(healthy, wantHealthy) || r.HTTPAddr != addr || r.Fingerprint.BerthVersion != version {
			t.Errorf("node %d: row %+v (healthy %q), want %q %q %q %q drain %t healthy %q %q %q", i, r, healthy,
				id, name, status, elig, drain, wantHealthy, addr, version)
		}
	}
	if got := slices.Sorted(maps.Keys(rows[0].Drivers)); !slices.Equal(got, []string{"docker", "exec", "raw_exec"}) {
		t.Errorf("drivers %q", got)
	}
}

func TestNodeRowWordRefusesWhatIsNoEnum(t *testing.T) {
	for _, in := range []string{`1.5`, `true`, `{}`, `99999999999`} {
		var w Word
		if err := json.Unmarshal([]byte(in), &w); err == nil {
			t.Errorf("%s read as Word %q", in, w)
		}
	}
}

// NodeRows asks for list stubs, beside the caller's own parameters, and
// leaves the caller's options as they were.
func TestNodeRowsAskForStubs(t *testing.T) {
	var gotQuery url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery = r.URL.Query()
		w.Write([]byte(`[{"id":"n1","name":"a","status":"ready"}]`))
	}))
	defer srv.Close()
	c, err := NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := &QueryOptions{PerPage: 7, Params: map[string]string{"status": "ready"}}
	rows, _, err := c.NodeRows(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].ID != "n1" || rows[0].Status != "ready" {
		t.Fatalf("rows %+v", rows)
	}
	if gotQuery.Get("stub") != "true" || gotQuery.Get("status") != "ready" || gotQuery.Get("per_page") != "7" {
		t.Fatalf("query %v", gotQuery)
	}
	if len(q.Params) != 1 {
		t.Fatalf("the caller's params became %v", q.Params)
	}
	if _, _, err := c.NodeRows(context.Background(), nil); err != nil || gotQuery.Get("stub") != "true" {
		t.Fatalf("without options: %v, query %v", err, gotQuery)
	}
}
