package api

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestRedirectDropsTheTokenAcrossHosts: a redirect to another host (here
// another port) does not carry X-Berth-Token; one on the same host does.
func TestRedirectDropsTheTokenAcrossHosts(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // final server: the token it saw
	answer := func(name string, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[name] = r.Header.Get("X-Berth-Token")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`"127.0.0.1:7647"`))
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answer("other host", w, r) }))
	defer other.Close()
	toOther := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer toOther.Close()
	toSelf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("moved") == "" {
			http.Redirect(w, r, r.URL.Path+"?moved=1", http.StatusTemporaryRedirect)
			return
		}
		answer("same host", w, r)
	}))
	defer toSelf.Close()

	for _, tc := range []struct{ addr, server, want string }{
		{toOther.URL, "other host", ""},
		{toSelf.URL, "same host", "s3cret"},
	} {
		c, err := NewClient(tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetToken("s3cret")
		if _, err := c.Leader(t.Context()); err != nil {
			t.Fatalf("%s: %v", tc.server, err)
		}
		mu.Lock()
		got, ok := seen[tc.server]
		mu.Unlock()
		if !ok || got != tc.want {
			t.Errorf("redirect to the %s: it saw token %q (reached: %v), want %q", tc.server, got, ok, tc.want)
		}
	}
}
