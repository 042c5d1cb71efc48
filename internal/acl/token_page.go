package acl

import (
	"net/http"
	"strings"
)

// FromPageHeader is FromHeader for an HTTP request to the agent (the web
// UI's pages and the API alike): an Authorization of another scheme than
// Bearer is not berth's (HTTP Basic, sent by the browser on every request,
// the UI's own API calls too, to an agent behind a reverse proxy that asks
// for it) and is ignored, not refused, as Nomad does.
func FromPageHeader(h http.Header) (string, error) {
	if v := h.Get(AuthHeader); v != "" {
		scheme, _, _ := strings.Cut(strings.TrimSpace(v), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			h = h.Clone()
			h.Del(AuthHeader)
		}
	}
	return FromHeader(h)
}
