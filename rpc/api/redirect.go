package api

import (
	"errors"
	"net/http"
)

// tokenHeader is the header the client sends its ACL token in.
const tokenHeader = "X-Berth-Token"

// maxRedirects is how many redirects a request follows, as net/http's
// default.
const maxRedirects = 10

// checkRedirect is the client's redirect policy: net/http's limit, and the
// token is not sent on to another host or from HTTPS to plain HTTP (net/http
// drops Authorization across hosts itself, but not a header of ours), so an
// agent or proxy that redirects cannot hand the token to someone else.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return errors.New("stopped after 10 redirects")
	}
	first := via[0].URL
	if req.URL.Host != first.Host || (first.Scheme == "https" && req.URL.Scheme != "https") {
		req.Header.Del(tokenHeader)
	}
	return nil
}
