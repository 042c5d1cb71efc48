package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// TestInProcessClient: requests reach the handler with the token, the
// escaped path and the query, without a socket; answers come back with
// their status, headers and body, and an error reply is an *Error.
func TestInProcessClient(t *testing.T) {
	var seen *http.Request
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/job/"):
			w.Header().Set("X-Berth-Index", "42")
			_, _ = w.Write([]byte(`{"id": "a/b", "name": "<x>"}`))
		default:
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"code": "permission_denied", "message": "needs read-job"}`))
		}
	})
	c := NewInProcessClient(h, "tok")
	job, meta, err := c.Jobs().Info(context.Background(), "a/b", &QueryOptions{WaitIndex: 7})
	if err != nil {
		t.Fatal(err)
	}
	if job.GetId() != "a/b" || job.GetName() != "<x>" || meta.LastIndex != 42 {
		t.Errorf("job %v, index %d", job, meta.LastIndex)
	}
	if seen.Header.Get("X-Berth-Token") != "tok" || seen.URL.EscapedPath() != "/v1/job/a%2Fb" || seen.URL.Query().Get("index") != "7" || seen.RemoteAddr == "" {
		t.Errorf("the handler saw token %q, path %q, query %q, remote %q", seen.Header.Get("X-Berth-Token"), seen.URL.EscapedPath(), seen.URL.RawQuery, seen.RemoteAddr)
	}
	_, _, err = c.Nodes(context.Background(), nil)
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusForbidden || e.Code != "permission_denied" || e.Message != "needs read-job" {
		t.Errorf("error reply: %v", err)
	}
}

// TestInProcessHandlerPanic: a handler that panics answers 500 with the
// API's error, and the caller (a goroutine of the UI's) lives on; one that
// aborts its answer is an error.
func TestInProcessHandlerPanic(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/nodes" {
			panic("a bug in a read handler")
		}
		panic(http.ErrAbortHandler)
	})
	c := NewInProcessClient(h, "")
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Nodes(context.Background(), nil)
		done <- err
	}()
	err := <-done
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusInternalServerError || e.Code != "internal" || !strings.Contains(e.Message, "panicked serving GET /v1/nodes") {
		t.Fatalf("a panicking handler: %v, want a 500 naming the request", err)
	}
	if _, _, err := c.Jobs().List(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "aborted its answer") {
		t.Fatalf("an aborting handler: %v", err)
	}
}
