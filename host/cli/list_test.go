package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/host/agent"
	"berth.dev/berth/host/server/servertest"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// registerNodes registers count synthetic nodes (every third down) straight
// through the agent's raft. It returns every node in state, in ID order.
func registerNodes(t *testing.T, a *agent.Agent, count int) []*pb.Node {
	t.Helper()
	servertest.RegisterNodes(t, a.Server().Raft(), servertest.SyntheticNodes(count, func(n *pb.Node) { n.HttpAddr = "10.1.0.1:7646" }))
	nodes, err := a.Server().State().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != count+1 {
		t.Fatalf("%d nodes in state, want %d", len(nodes), count+1)
	}
	return nodes
}

// httpPages reads /v1/nodes page by page and returns the IDs in the order
// the pages gave them.
func httpPages(t *testing.T, a *agent.Agent, query string) (ids []string, pages int) {
	t.Helper()
	token := ""
	for {
		resp, err := http.Get("http://" + a.HTTPAddr() + "/v1/nodes?per_page=1000&next_token=" + token + query)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /v1/nodes: %d %v %.200s", resp.StatusCode, err, body)
		}
		page, err := apijson.UnmarshalList(body, func() *pb.Node { return &pb.Node{} })
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 1000 {
			t.Fatalf("page of %d nodes", len(page))
		}
		for _, n := range page {
			ids = append(ids, n.GetId())
		}
		pages++
		if token = resp.Header.Get(agent.HeaderNextToken); token == "" {
			return ids, pages
		}
	}
}

func TestTenThousandNodesListThroughAPIAndCLI(t *testing.T) {
	a := startAgent(t)
	t.Setenv("BERTH_ADDR", "http://"+a.HTTPAddr())
	start := time.Now()
	nodes := registerNodes(t, a, 10_000)
	t.Logf("registered 10,000 nodes in %s", time.Since(start))
	start = time.Now()
	var all, down, ready []string
	for _, n := range nodes {
		all = append(all, n.GetId())
		if n.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN {
			down = append(down, n.GetId())
		} else {
			ready = append(ready, n.GetId())
		}
	}
	if !slices.IsSorted(all) || len(down) != 3334 {
		t.Fatalf("fixture: sorted %v, %d down", slices.IsSorted(all), len(down))
	}

	// The HTTP API: every node exactly once, in order, per filter.
	for _, c := range []struct {
		query     string
		want      []string
		wantPages int
	}{{"", all, 11}, {"&status=down", down, 4}, {"&status=ready", ready, 7}} {
		got, pages := httpPages(t, a, c.query)
		if !slices.Equal(got, c.want) || pages != c.wantPages {
			t.Fatalf("/v1/nodes%s: %d nodes in %d pages, want %d in %d", c.query, len(got), pages, len(c.want), c.wantPages)
		}
	}

	t.Logf("listed them three times over HTTP in %s", time.Since(start))
	start = time.Now()
	// The CLI follows the pages: a row per node, and one JSON array.
	code, out, errOut := berth(t, "node", "status")
	if code != 0 {
		t.Fatalf("node status: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(all)+1 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("node status printed %d lines, want a header and %d rows", len(lines), len(all))
	}
	for i, id := range all {
		if !strings.HasPrefix(lines[i+1], id[:8]+" ") {
			t.Fatalf("row %d is %q, want node %s", i+1, lines[i+1], id)
		}
	}
	code, out, errOut = berth(t, "node", "status", "-json")
	if code != 0 {
		t.Fatalf("node status -json: exit %d: %s", code, errOut)
	}
	var items []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &items); err != nil {
		t.Fatalf("node status -json is not one JSON array: %v", err)
	}
	if len(items) != len(all) {
		t.Fatalf("node status -json has %d items, want %d", len(items), len(all))
	}
	for i, it := range items {
		if it.ID != all[i] || (it.Status != "ready" && it.Status != "down") {
			t.Fatalf("item %d = %+v, want node %s", i, it, all[i])
		}
	}

	t.Logf("CLI table and -json in %s", time.Since(start))
	// A prefix lookup reads one page from the prefix on, then the node and
	// the volumes on it: three requests, however many nodes there are, and
	// not the whole list. A proxy in front of the agent counts them.
	var mu sync.Mutex
	var requests []string
	agentURL := &url.URL{Scheme: "http", Host: a.HTTPAddr()}
	proxy := httputil.NewSingleHostReverseProxy(agentURL)
	counter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	defer counter.Close()
	prefix := all[5000][:8]
	code, out, errOut = berth(t, "node", "status", "-address", counter.URL, prefix)
	if code != 0 || !strings.Contains(out, all[5000]) {
		t.Fatalf("node status %s: exit %d %s%s", prefix, code, out, errOut)
	}
	want := []string{"GET /v1/nodes?next_token=" + prefix + "&per_page=100", "GET /v1/node/" + all[5000],
		"GET /v1/volumes?node_id=" + all[5000] + "&per_page=1000"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(requests, want) {
		t.Fatalf("node status %s sent %q, want %q", prefix, requests, want)
	}
}
