package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

func TestNewClientAddresses(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:7646":         "http://127.0.0.1:7646",
		"http://10.0.0.1:7646":   "http://10.0.0.1:7646",
		"https://berth.internal": "https://berth.internal",
	} {
		c, err := NewClient(addr)
		if err != nil || c.Address() != want {
			t.Errorf("NewClient(%q) = %v, %v; want %s", addr, c, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://x:1", "http://", "http://[::1"} {
		if _, err := NewClient(bad); err == nil {
			t.Errorf("NewClient(%q) accepted", bad)
		}
	}
}

func TestErrorsCarryStatusAndCode(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/node/missing":
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"code":"not_found","message":"node missing not found"}`))
		default:
			// A proxy in the way answers with plain text.
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte("upstream down\n"))
		}
	}))
	defer srv.Close()
	c, err := NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Node(context.Background(), "missing", nil)
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "not_found" || !IsNotFound(err) {
		t.Fatalf("Node(missing) error = %#v", err)
	}
	// The JSON code reads back as the gRPC code the server refused with.
	if got := errcode.Code(fmt.Errorf("node status: %w", err)); got != codes.NotFound {
		t.Fatalf("errcode.Code(API not_found) = %s", got)
	}
	_, err = c.Leader(context.Background())
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 502 || apiErr.Code != "unknown" || apiErr.Message != "upstream down" {
		t.Fatalf("Leader via a broken proxy: %#v", err)
	}
	if IsNotFound(err) || errcode.Code(err) != codes.Unknown {
		t.Fatalf("a 502 from a proxy reported as %s", errcode.Code(err))
	}
}

func TestQueryOptionsAndMetaHeaders(t *testing.T) {
	var gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery = r.URL.RawQuery
		w.Header().Set("X-Berth-Index", "42")
		w.Header().Set("X-Berth-KnownLeader", "true")
		w.Header().Set("X-Berth-LastContact", "15")
		w.Header().Set("X-Berth-NextToken", "n2")
		w.Write([]byte(`[{"id":"n1","name":"a","status":"ready","create_index":18446744073709551615}]`))
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL)
	nodes, meta, err := c.Nodes(context.Background(), &QueryOptions{WaitIndex: 41, WaitTime: 5 * time.Second, Consistent: true,
		PerPage: 2, NextToken: "n0", Params: map[string]string{"status": "ready"}})
	if err != nil {
		t.Fatal(err)
	}
	if gotQuery != "consistent=true&index=41&next_token=n0&per_page=2&status=ready&wait=5s" {
		t.Fatalf("query sent = %q", gotQuery)
	}
	if len(nodes) != 1 || nodes[0].GetId() != "n1" || nodes[0].GetStatus() != pb.NodeStatus_NODE_STATUS_READY || nodes[0].GetCreateIndex() != math.MaxUint64 {
		t.Fatalf("nodes = %v", nodes)
	}
	if meta.LastIndex != 42 || !meta.KnownLeader || meta.LastContact != 15*time.Millisecond || meta.NextToken != "n2" {
		t.Fatalf("meta = %+v", meta)
	}
}

func TestSnapshotSaveStreamsTheBody(t *testing.T) {
	payload := bytes.Repeat([]byte("snap"), 100_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/operator/snapshot" {
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
		}
		w.Write(payload)
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL)
	var buf bytes.Buffer
	n, err := c.SnapshotSave(context.Background(), &buf)
	if err != nil || n != int64(len(payload)) || !bytes.Equal(buf.Bytes(), payload) {
		t.Fatalf("SnapshotSave = %d, %v (%d bytes)", n, err, buf.Len())
	}
	if _, err := c.RemovePeer(context.Background(), ""); err == nil || !strings.Contains(err.Error(), "needs") {
		t.Fatalf("RemovePeer without a peer: %v", err)
	}
}

func TestAllPagesFollowsNextToken(t *testing.T) {
	var tokens []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.URL.Query().Get("next_token")
		tokens = append(tokens, tok)
		if r.URL.Query().Get("per_page") != "2" || r.URL.Query().Get("status") != "down" {
			t.Errorf("query %s lost the page size or filter", r.URL.RawQuery)
		}
		switch tok {
		case "":
			w.Header().Set("X-Berth-NextToken", "c")
			fmt.Fprint(w, `[{"id":"a"},{"id":"b"}]`)
		case "c":
			w.Header().Set("X-Berth-NextToken", "e")
			fmt.Fprint(w, `[{"id":"c"},{"id":"d"}]`)
		case "e":
			fmt.Fprint(w, `[{"id":"e"}]`)
		case "loop":
			w.Header().Set("X-Berth-NextToken", "loop")
			fmt.Fprint(w, `[]`)
		}
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL)
	q := &QueryOptions{PerPage: 2, Params: map[string]string{"status": "down"}}
	nodes, meta, err := AllPages(context.Background(), q, c.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.GetId())
	}
	if strings.Join(ids, ",") != "a,b,c,d,e" || strings.Join(tokens, ",") != ",c,e" || meta.NextToken != "" || q.NextToken != "" {
		t.Fatalf("ids %v, tokens %q, meta %+v, q %+v", ids, tokens, meta, q)
	}
	q.NextToken = "loop"
	if _, _, err := AllPages(context.Background(), q, c.Nodes); !errors.Is(err, ErrPageToken) || !strings.Contains(err.Error(), `GET /v1/nodes answered next_token "loop" to a request with next_token "loop"`) {
		t.Fatalf("a token that does not advance: %v", err)
	}
}
