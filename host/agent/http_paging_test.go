package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/host/server/servertest"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

var update = flag.Bool("update", false, "rewrite testdata/api/*.golden")

// applyNodes registers count synthetic nodes (every third down) straight
// through the agent's raft. It returns all node IDs in the cluster, sorted.
func applyNodes(t *testing.T, a *Agent, count int) []string {
	t.Helper()
	servertest.RegisterNodes(t, a.Server().Raft(), servertest.SyntheticNodes(count, nil))
	nodes, err := a.Server().State().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.GetId()
	}
	return ids
}

func TestNodeListIsPagedAndFiltered(t *testing.T) {
	a := testAgent(t)
	ids := applyNodes(t, a, 250)
	if len(ids) != 251 {
		t.Fatalf("%d nodes in state, want 251", len(ids))
	}

	// The default page is 100 nodes, with the next page's first ID.
	r := do(t, a, "GET", "/v1/nodes", nil)
	first, err := apijson.UnmarshalList(r.body, func() *pb.Node { return &pb.Node{} })
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 100 || first[0].GetId() != ids[0] || r.header.Get(HeaderNextToken) != ids[100] {
		t.Fatalf("first page: %d nodes, next token %q (want 100, %s)", len(first), r.header.Get(HeaderNextToken), ids[100])
	}

	// Following the tokens visits every node once, in order, for each filter.
	for filter, want := range map[string]func(*pb.Node) bool{
		"":              func(*pb.Node) bool { return true },
		"&status=down":  func(n *pb.Node) bool { return n.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN },
		"&status=ready": func(n *pb.Node) bool { return n.GetStatus() == pb.NodeStatus_NODE_STATUS_READY },
	} {
		var got, wantIDs []string
		for _, id := range ids {
			n, _ := a.Server().State().NodeByID(nil, id)
			if want(n) {
				wantIDs = append(wantIDs, id)
			}
		}
		token, pages := "", 0
		for {
			r := do(t, a, "GET", "/v1/nodes?per_page=40&next_token="+token+filter, nil)
			page, err := apijson.UnmarshalList(r.body, func() *pb.Node { return &pb.Node{} })
			if err != nil || r.status != 200 {
				t.Fatalf("%s: %d %v %s", filter, r.status, err, r.body)
			}
			for _, n := range page {
				if !want(n) {
					t.Fatalf("%s: node %s is %s", filter, n.GetId(), n.GetStatus())
				}
				got = append(got, n.GetId())
			}
			pages++
			if token = r.header.Get(HeaderNextToken); token == "" {
				break
			}
		}
		if !slices.Equal(got, wantIDs) || pages != (len(wantIDs)+39)/40 {
			t.Fatalf("filter %q: %d nodes in %d pages, want %d", filter, len(got), pages, len(wantIDs))
		}
	}

	do(t, a, "GET", "/v1/nodes?status=redy", nil).wantError(t, 400, "invalid_argument", `status="redy": must be one of ready, down`)
	do(t, a, "GET", "/v1/nodes?status=unspecified", nil).wantError(t, 400, "invalid_argument", "must be one of ready, down")
	do(t, a, "GET", "/v1/nodes?per_page=1001", nil).wantError(t, 400, "invalid_argument", `per_page="1001": must be an integer from 1 to 1000`)
	do(t, a, "GET", "/v1/nodes?per_page=0", nil).wantError(t, 400, "invalid_argument", `per_page="0"`)
	do(t, a, "GET", "/v1/nodes?per_page=ten", nil).wantError(t, 400, "invalid_argument", `per_page="ten"`)
}

// joinServer starts a server-only agent on free loopback ports that joins
// the cluster of the server at rpcAddr.
func joinServer(t *testing.T, name, rpcAddr string) *Agent {
	t.Helper()
	cfg := DevConfig()
	cfg.Name = name
	cfg.Ports = Ports{}
	cfg.Client.Enabled = false
	cfg.Server.RetryJoin = []string{rpcAddr}
	cfg.Server.RetryInterval = 100 * time.Millisecond
	a, err := New(cfg, testutil.Logger(t).Named(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	return a
}

// getPages follows a server list over HTTP one item per page, decoding
// each page with decode, and returns the items' keys in page order.
func getPages(t *testing.T, a *Agent, path string, decode func([]byte) ([]string, error)) (keys []string, pages int) {
	t.Helper()
	token := ""
	for pages < 10 {
		r := do(t, a, "GET", path+"?per_page=1&next_token="+url.QueryEscape(token), nil)
		page, err := decode(r.body)
		if err != nil || r.status != 200 || len(page) != 1 {
			t.Fatalf("%s page %d: %d %v %s", path, pages+1, r.status, err, r.body)
		}
		keys = append(keys, page...)
		pages++
		if token = r.header.Get(HeaderNextToken); token == "" {
			return keys, pages
		}
	}
	t.Fatalf("%s: still a next page after %d pages of one", path, pages)
	return nil, 0
}

// TestServerListsArePagedAndDoNotBlock pages the three server lists over
// HTTP on a real three-server cluster, one server per page, so every list
// hands out next tokens and is followed to its end.
func TestServerListsArePagedAndDoNotBlock(t *testing.T) {
	a := testAgent(t)
	agents := []*Agent{a, joinServer(t, "s2", a.rpcAddrs[0]), joinServer(t, "s3", a.rpcAddrs[0])}
	var ids, addrs []string
	for _, ag := range agents {
		ids = append(ids, ag.Server().ID())
		addrs = append(addrs, ag.rpcAddrs[0])
	}
	slices.Sort(ids)
	slices.Sort(addrs)
	testutil.WaitFor(t, 30*time.Second, func() error {
		r := do(t, a, "GET", "/v1/agent/members", nil)
		members, err := apijson.UnmarshalList(r.body, func() *pb.Member { return &pb.Member{} })
		if err != nil {
			return err
		}
		alive := 0
		for _, m := range members {
			if m.GetStatus() == pb.MemberStatus_MEMBER_STATUS_ALIVE && m.GetVoter() {
				alive++
			}
		}
		if alive != 3 {
			return fmt.Errorf("%d alive voters of %d members, want 3", alive, len(members))
		}
		return nil
	})

	members, pages := getPages(t, a, "/v1/agent/members", func(b []byte) ([]string, error) {
		ms, err := apijson.UnmarshalList(b, func() *pb.Member { return &pb.Member{} })
		var keys []string
		for _, m := range ms {
			if m.GetStatus() != pb.MemberStatus_MEMBER_STATUS_ALIVE {
				return nil, fmt.Errorf("member %s is %s", m.GetServer().GetName(), m.GetStatus())
			}
			keys = append(keys, m.GetServer().GetId())
		}
		return keys, err
	})
	if !slices.Equal(members, ids) || pages != 3 {
		t.Fatalf("members in %d pages: %v, want %v", pages, members, ids)
	}
	peers, pages := getPages(t, a, "/v1/status/peers", func(b []byte) (keys []string, err error) {
		return keys, json.Unmarshal(b, &keys)
	})
	if !slices.Equal(peers, addrs) || pages != 3 {
		t.Fatalf("peers in %d pages: %v, want %v", pages, peers, addrs)
	}
	servers, pages := getPages(t, a, "/v1/operator/raft/configuration", func(b []byte) ([]string, error) {
		conf := &pb.RaftConfigurationResponse{}
		err := apijson.Unmarshal(b, conf)
		var keys []string
		for _, rs := range conf.GetServers() {
			keys = append(keys, rs.GetId())
		}
		return keys, err
	})
	if !slices.Equal(servers, ids) || pages != 3 {
		t.Fatalf("raft configuration in %d pages: %v, want %v", pages, servers, ids)
	}

	// The Go client's page iterator follows the same tokens.
	c, err := api.NewClient(a.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	all, _, err := api.AllPages(context.Background(), &api.QueryOptions{PerPage: 1}, c.Peers)
	if err != nil || !slices.Equal(all, addrs) {
		t.Fatalf("api.AllPages(Peers) = %v, %v; want %v", all, err, addrs)
	}

	for _, path := range []string{"/v1/agent/members", "/v1/status/peers", "/v1/operator/raft/configuration"} {
		do(t, a, "GET", path+"?index=3&wait=1s", nil).wantError(t, 400, "invalid_argument", "does not support blocking queries")
		do(t, a, "GET", path+"?per_page=5000", nil).wantError(t, 400, "invalid_argument", "per_page")
	}
}

// TestResponseBodiesGolden pins what curl shows for the endpoints whose
// bodies are not messages (leader, peers) and for an error, with the
// agent's random address replaced by ADDR.
func TestResponseBodiesGolden(t *testing.T) {
	a := testAgent(t)
	for name, path := range map[string]string{
		"leader":      "/v1/status/leader",
		"peers":       "/v1/status/peers",
		"error":       "/v1/node/00000000-0000-4000-8000-000000000000",
		"bad_request": "/v1/nodes?status=redy",
	} {
		body := do(t, a, "GET", path, nil).body
		body = bytes.ReplaceAll(body, []byte(a.rpcAddrs[0]), []byte("ADDR"))
		file := filepath.Join("testdata", "api", name+".golden")
		if *update {
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, body, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%v (go test -update creates it)", err)
		}
		if !bytes.Equal(body, want) {
			t.Errorf("%s: body differs from %s (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, file, body, want)
		}
	}
	if strings.Contains(string(do(t, a, "GET", "/v1/nodes", nil).body), "NODE_STATUS") {
		t.Error("the node list still shows proto enum names")
	}
}
