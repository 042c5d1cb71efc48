package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// misbehavingAgent answers every /v1/nodes request with the same page and
// the X-Berth-NextToken next returns for the token the request sent, and
// counts the requests.
func misbehavingAgent(t *testing.T, next func(sent string) string) (*Client, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 100 {
			// The client under test loops; fail fast instead of running
			// until the test times out.
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		w.Header().Set("X-Berth-NextToken", next(r.URL.Query().Get("next_token")))
		fmt.Fprint(w, `[{"id":"a"}]`)
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return c, &n
}

func TestPagesRefuseATokenThatDoesNotAdvance(t *testing.T) {
	for _, c := range []struct {
		name     string
		start    string
		next     func(string) string
		requests int64
		want     string
	}{
		// The fake agent of the review: the same page and token forever.
		{"same token", "", func(string) string { return "b" }, 2, `next_token "b" to a request with next_token "b"`},
		{"token goes back", "m", func(string) string { return "c" }, 1, `next_token "c" to a request with next_token "m"`},
		// A token that moves but not forward would also never end: the
		// tokens are all distinct, so only the order catches it.
		{"token shrinks", "", func(sent string) string {
			if sent == "" {
				return "zzzz"
			}
			return sent[:len(sent)-1] + "y"
		}, 2, `next_token "zzzy" to a request with next_token "zzzz"`},
		// "a" < "a\x00" in byte order, however a collation would sort them.
		{"prefix of the sent token", "a\x00", func(string) string { return "a" }, 1, `next_token "a" to a request with next_token "a\x00"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, n := misbehavingAgent(t, c.next)
			q := &QueryOptions{NextToken: c.start}
			_, _, err := AllPages(context.Background(), q, client.Nodes)
			if !errors.Is(err, ErrPageToken) || errcode.Code(err) != codes.Internal {
				t.Fatalf("AllPages = %v (code %s), want ErrPageToken", err, errcode.Code(err))
			}
			if !strings.Contains(err.Error(), "GET /v1/nodes answered "+c.want) {
				t.Fatalf("error %q does not name the endpoint and tokens %s", err, c.want)
			}
			if got := n.Load(); got != c.requests {
				t.Fatalf("%d requests, want %d", got, c.requests)
			}
			if q.NextToken != c.start {
				t.Fatalf("AllPages changed q.NextToken to %q", q.NextToken)
			}
		})
	}
}

func TestPagesStopWhenTheLoopBreaks(t *testing.T) {
	client, n := misbehavingAgent(t, func(sent string) string { return sent + "a" })
	pages := 0
	for page, err := range Pages(context.Background(), &QueryOptions{PerPage: 1}, client.Nodes) {
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != 1 || page.Meta.Endpoint != "GET /v1/nodes" || page.Meta.NextToken != strings.Repeat("a", pages+1) {
			t.Fatalf("page %d = %v, meta %+v", pages, page.Items, page.Meta)
		}
		if pages++; pages == 3 {
			break
		}
	}
	if n.Load() != 3 {
		t.Fatalf("%d requests for 3 pages", n.Load())
	}
}

func TestParamsMayNotSetReservedParameters(t *testing.T) {
	client, n := misbehavingAgent(t, func(string) string { return "" })
	for _, k := range reservedParams {
		q := &QueryOptions{PerPage: 2, Params: map[string]string{"status": "ready", k: "x"}}
		_, _, err := AllPages(context.Background(), q, client.Nodes)
		if !errors.Is(err, ErrReservedParam) || errcode.Code(err) != codes.InvalidArgument ||
			!strings.Contains(err.Error(), fmt.Sprintf("GET /v1/nodes: api: QueryOptions.Params sets a parameter that has a QueryOptions field: Params[%q]", k)) {
			t.Errorf("Params[%q]: %v", k, err)
		}
		if _, _, err := client.Peers(context.Background(), q); !errors.Is(err, ErrReservedParam) {
			t.Errorf("Peers with Params[%q]: %v", k, err)
		}
	}
	if n.Load() != 0 {
		t.Fatalf("%d requests sent with a reserved parameter in Params", n.Load())
	}
	// Other parameters pass through.
	if _, _, err := client.Nodes(context.Background(), &QueryOptions{Params: map[string]string{"status": "ready"}}); err != nil || n.Load() != 1 {
		t.Fatalf("Nodes with a filter: %v after %d requests", err, n.Load())
	}
}
