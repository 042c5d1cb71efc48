package agent

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestNonUTF8PathAndQueryAre400NamingTheParameter: a byte that is not
// UTF-8 in a path or query parameter never reaches a server (where
// proto.Marshal refused it, a 500); it is a 400 naming the parameter.
func TestNonUTF8PathAndQueryAre400NamingTheParameter(t *testing.T) {
	f := newFakeServers(t)
	for _, tt := range []struct{ method, path, msg string }{
		{"GET", "/v1/job/%FF", "path parameter id: not valid UTF-8"},
		{"GET", "/v1/job/%C0%AF/allocations", "path parameter id: not valid UTF-8"},
		{"DELETE", "/v1/volume/csi/v1/claims/%ED%A0%80", "path parameter claim: not valid UTF-8"},
		{"GET", "/v1/jobs?next_token=%FF", "query parameter next_token: not valid UTF-8"},
		{"GET", "/v1/volumes?plugin_id=%FF", "query parameter plugin_id: not valid UTF-8"},
		{"GET", "/v1/allocations?%FF=1", "query: a parameter name is not valid UTF-8"},
		{"GET", "/v1/jobs?prefix=%zz", `query: invalid URL escape \"%zz\"`},
	} {
		r := call(t, f.url, tt.method, tt.path, "")
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), tt.msg) {
			t.Errorf("%s %s: %d %s, want 400 with %q", tt.method, tt.path, r.status, r.body, tt.msg)
		}
	}
	if n := len(f.state.requests("Jobs.Get")) + len(f.state.requests("Jobs.List")); n != 0 {
		t.Errorf("%d requests with bad text reached the servers", n)
	}
}

// TestServerErrorsAreLogged: every 5xx the agent answers is in its log with
// the method, path, status, code and message; a 4xx is not.
func TestServerErrorsAreLogged(t *testing.T) {
	var buf syncBuffer
	rt := newRouter(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info}))
	rt.handle("/v1/job/{id}", map[string]handlerFunc{
		"GET": func(http.ResponseWriter, *http.Request) error {
			return status.Error(codes.Internal, "state store on fire")
		},
		"DELETE": func(http.ResponseWriter, *http.Request) error { return badRequest("no") },
	})
	srv := httptest.NewServer(rt.mux)
	t.Cleanup(srv.Close)
	if r := call(t, srv.URL, "GET", "/v1/job/web%20app", ""); r.status != http.StatusInternalServerError {
		t.Fatalf("GET: %d %s, want 500", r.status, r.body)
	}
	if r := call(t, srv.URL, "DELETE", "/v1/job/web", ""); r.status != http.StatusBadRequest {
		t.Fatalf("DELETE: %d %s, want 400", r.status, r.body)
	}
	log := buf.String()
	for _, want := range []string{"http request failed", "method=GET", `path="/v1/job/web%20app"`, "status=500", "code=internal", `message="state store on fire"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "DELETE") {
		t.Errorf("a 400 was logged:\n%s", log)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
