package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
)

// NewInProcessClient returns a client whose requests are served by h, the
// agent's own API handler, in this process: no socket, no TLS, but the
// same routes, authorization and encoding as over the network. The agent's
// web UI reads through it with the token of the page's request, so a page
// sees exactly what the API would show that token. token may be empty.
func NewInProcessClient(h http.Handler, token string) *Client {
	return &Client{
		base:  &url.URL{Scheme: "http", Host: "in-process"},
		token: token,
		http:  &http.Client{Transport: handlerTransport{h}, CheckRedirect: checkRedirect},
	}
}

// handlerTransport serves a request with a handler. The whole answer is
// kept before it is returned, so it suits reads and writes, not a
// followed log (whose body never ends).
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// A RoundTripper must not change the request; a handler may read it.
	r := req.Clone(req.Context())
	if r.Body == nil {
		r.Body = http.NoBody
	}
	r.RequestURI = r.URL.RequestURI()
	r.RemoteAddr = "in-process"
	w := &bufferedResponse{header: http.Header{}}
	if err := serveRecovered(t.h, w, r); err != nil {
		return nil, err
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return &http.Response{
		Status:        http.StatusText(w.status),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.header,
		Body:          io.NopCloser(bytes.NewReader(w.body.Bytes())),
		ContentLength: int64(w.body.Len()),
		Request:       req,
	}, nil
}

// serveRecovered serves r with h, turning a panic into a 500, as net/http
// does for a handler on a connection: the UI's reads run in goroutines of
// their own, where a panic would end the process. The stack goes to
// stderr, as net/http's does. A handler that aborts its answer
// (http.ErrAbortHandler) is an error, as a broken connection would be.
func serveRecovered(h http.Handler, w *bufferedResponse, r *http.Request) (err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if p == http.ErrAbortHandler {
			err = fmt.Errorf("%s %s: the handler aborted its answer", r.Method, r.URL.Path)
			return
		}
		fmt.Fprintf(os.Stderr, "berth: panic serving in-process %s %s: %v\n%s", r.Method, r.URL.Path, p, debug.Stack())
		w.header = http.Header{"Content-Type": {"application/json"}}
		w.status = http.StatusInternalServerError
		w.body.Reset()
		b, _ := json.Marshal(map[string]string{"code": "internal",
			"message": fmt.Sprintf("internal error: the API handler panicked serving %s %s: %v (the stack is in the agent's log)", r.Method, r.URL.Path, p)})
		w.body.Write(b)
	}()
	h.ServeHTTP(w, r)
	return nil
}

// bufferedResponse is the http.ResponseWriter of an in-process request.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *bufferedResponse) Header() http.Header { return w.header }

func (w *bufferedResponse) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *bufferedResponse) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}
