package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server"
)

// TestErrorsAnswerWithTheirCodesStatus feeds writeError each kind of error
// a handler returns and checks the HTTP status and the exact JSON body.
func TestErrorsAnswerWithTheirCodesStatus(t *testing.T) {
	for _, tt := range []struct {
		name   string
		err    error
		status int
		body   map[string]string
	}{
		{"sentinel of the agent's process", fmt.Errorf("node n1: %w", fsm.ErrNodeNotFound),
			404, map[string]string{"code": "not_found", "message": "node n1: node not found"}},
		{"status from a server", status.Error(codes.FailedPrecondition, "volume v1 has a writer"),
			409, map[string]string{"code": "failed_precondition", "message": "volume v1 has a writer"}},
		{"server sentinel", fmt.Errorf("restore: %w: checksum mismatch", server.ErrBadArchive),
			400, map[string]string{"code": "invalid_argument", "message": "restore: invalid snapshot archive: checksum mismatch"}},
		{"raft", fmt.Errorf("apply: %w", raft.ErrNotLeader),
			503, map[string]string{"code": "unavailable", "message": "apply: node is not the leader"}},
		{"unclassified", errors.New("disk on fire"),
			500, map[string]string{"code": "unknown", "message": "disk on fire"}},
		{"method", &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed", msg: "no POST"},
			405, map[string]string{"code": "method_not_allowed", "message": "no POST"}},
	} {
		rec := httptest.NewRecorder()
		writeError(rec, tt.err)
		var body map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: body %q: %v", tt.name, rec.Body, err)
		}
		if rec.Code != tt.status || !reflect.DeepEqual(body, tt.body) || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %v (%s), want %d %v", tt.name, rec.Code, body, rec.Header().Get("Content-Type"), tt.status, tt.body)
		}
	}
}

// TestUnknownNodeIs404NotFound asks a real agent for a node nobody
// registered: the server's fsm.ErrNodeNotFound comes back as 404 with
// {"code": "not_found", "message": ...} naming the node, and nothing else.
func TestUnknownNodeIs404NotFound(t *testing.T) {
	a := testAgent(t)
	const ghost = "00000000-0000-4000-8000-00000000dead"
	r := do(t, a, "GET", "/v1/node/"+ghost, nil)
	var body map[string]string
	r.decode(t, &body)
	want := map[string]string{"code": "not_found", "message": "node " + ghost + ": node not found"}
	if r.status != http.StatusNotFound || !reflect.DeepEqual(body, want) {
		t.Fatalf("GET /v1/node/%s = %d %v, want 404 %v", ghost, r.status, body, want)
	}
}

// TestEveryReadOfAnUnknownObjectIs404 asks a real agent, on every GET route
// with an ID in its path (read from the router), for an object nobody
// made: the answer is 404 naming it, never 200 with an empty list.
func TestEveryReadOfAnUnknownObjectIs404(t *testing.T) {
	a := testAgent(t)
	const ghost = "00000000-0000-4000-8000-00000000dead"
	checked := 0
	for pattern, methods := range a.apiRouter().routes {
		if methods["GET"] == nil || !strings.Contains(pattern, "{") || isUIPage(pattern) {
			continue // the UI's pages answer HTML: host/ui's TestUnknownIDsAre404
		}
		checked++
		path := regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(pattern, ghost)
		r := do(t, a, "GET", path, nil)
		var body map[string]string
		_ = json.Unmarshal(r.body, &body) // a list, if the bug is back
		if strings.HasPrefix(pattern, "/v1/acl/") {
			// This agent runs without ACL: ACL objects are not there to
			// be found, and the answer says why rather than 404.
			if r.status != http.StatusConflict || body["code"] != "failed_precondition" || !strings.Contains(body["message"], "ACL support disabled") {
				t.Errorf("GET %s without ACL = %d %s, want 409 failed_precondition: ACL support disabled", path, r.status, r.body)
			}
			continue
		}
		if r.status != http.StatusNotFound || body["code"] != "not_found" || !strings.Contains(body["message"], ghost) {
			t.Errorf("GET %s = %d %s, want 404 not_found naming %s", path, r.status, r.body, ghost)
		}
	}
	if checked < 10 {
		t.Fatalf("only %d read routes with an ID found", checked)
	}
}
