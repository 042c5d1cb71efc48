package api

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
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
	t.h.ServeHTTP(w, r)
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
