package agent

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"berth.dev/berth/internal/testutil"
)

// bodyRouter is a router with one route, PUT /hold, whose handler reads its
// body and then waits for release: the bodies it has read stay in flight.
func bodyRouter(t *testing.T, limit int64, wait, readTimeout time.Duration) (base string, read chan struct{}, release chan struct{}) {
	t.Helper()
	rt := newRouter(testutil.Logger(t))
	rt.maxBody = limit
	rt.inFlight = semaphore.NewWeighted(bodiesInFlight * limit)
	rt.bodyWait, rt.bodyReadTimeout = wait, readTimeout
	read, release = make(chan struct{}, 16), make(chan struct{})
	rt.handle("/hold", map[string]handlerFunc{"PUT": func(w http.ResponseWriter, r *http.Request) error {
		if _, err := readBody(w, r); err != nil {
			return err
		}
		read <- struct{}{}
		<-release
		return writeJSON(w, "ok")
	}})
	srv := httptest.NewServer(rt.mux)
	t.Cleanup(srv.Close)
	return srv.URL, read, release
}

func put(base string, body io.Reader, n int64) (int, string, error) {
	req, err := http.NewRequest("PUT", base+"/hold", body)
	if err != nil {
		return 0, "", err
	}
	req.ContentLength = n
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// Request bodies in flight together are bounded: with bodiesInFlight bodies
// of the largest size read and held, the next waits for room, is answered
// 503 with a clear message when none comes in time, and goes through when
// one is released. (32 concurrent bodies near the limit took the heap from
// 43 to 990 MiB with nothing bounding them.)
func TestRequestBodiesInFlightAreBounded(t *testing.T) {
	const limit = 1 << 20
	base, read, release := bodyRouter(t, limit, time.Hour, time.Minute)
	var wg sync.WaitGroup
	for range bodiesInFlight {
		wg.Go(func() {
			if code, b, err := put(base, strings.NewReader(strings.Repeat("x", limit)), limit); err != nil || code != 200 {
				t.Errorf("a body within the limit: %d %s %v", code, b, err)
			}
		})
	}
	for range bodiesInFlight {
		<-read
	}
	// The next waits: not read while the others are held.
	done := make(chan string)
	go func() {
		code, b, err := put(base, strings.NewReader(strings.Repeat("x", limit)), limit)
		done <- fmt.Sprint(code, b, err)
	}()
	select {
	case <-read:
		t.Fatal("a body was read with bodiesInFlight bodies of the limit's size in flight")
	case got := <-done:
		t.Fatalf("a body beyond those in flight was answered before any was released: %s", got)
	case <-time.After(200 * time.Millisecond): // a negative check: nothing to wait for
	}
	release <- struct{}{}
	<-read
	close(release)
	if got := <-done; !strings.HasPrefix(got, "200") {
		t.Fatalf("the waiting body, once room was made: %s", got)
	}
	wg.Wait()

	// With no room within the wait, a 503 that says why.
	base, read, release = bodyRouter(t, limit, 50*time.Millisecond, time.Minute)
	for range bodiesInFlight {
		wg.Go(func() { _, _, _ = put(base, strings.NewReader(strings.Repeat("x", limit)), limit) })
	}
	for range bodiesInFlight {
		<-read
	}
	code, b, err := put(base, strings.NewReader("{}"), 2)
	if err != nil || code != 503 || !strings.Contains(b, "had no room for this one's 2 within 50ms: try again") {
		t.Errorf("a body with no room in flight: %d %s %v; want 503 saying there is no room", code, b, err)
	}
	close(release)
	wg.Wait()
}

// A body trickled in cannot hold its share of the bytes in flight (and its
// connection) forever: reading it has a deadline.
func TestRequestBodyReadHasADeadline(t *testing.T) {
	base, _, release := bodyRouter(t, 1<<20, time.Hour, 100*time.Millisecond)
	defer close(release)
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte(`{"a": `)) }() // and nothing more
	code, b, err := put(base, pr, 1000)
	if err != nil || code != 400 || !strings.Contains(b, "reading request body: not received in time") {
		t.Fatalf("a stalled body: %d %s %v; want 400 not received in time", code, b, err)
	}
}

// A handler that panics (net/http recovers it per connection) still gives
// back its body's admission: a permit kept would shrink the room of every
// later body until the agent restarts.
func TestAPanickingHandlerGivesBackItsBodysAdmission(t *testing.T) {
	released := false
	func() {
		defer func() { _ = recover() }()
		_ = serveAdmitted(nil, nil, func(http.ResponseWriter, *http.Request) error { panic("handler bug") }, func() { released = true })
	}()
	if !released {
		t.Fatal("the admission of a panicking handler's body was not given back")
	}
}
