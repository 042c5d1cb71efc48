package agent

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
)

// checkRequestText refuses a request whose path parameters or query are not
// text the API can carry: every one of them ends up in a protobuf string
// field, which must be valid UTF-8 (proto.Marshal refuses anything else, so
// it would surface as an Internal error from deep in the gRPC client). A
// query that does not parse (a bad %-escape, a ';') is refused too, rather
// than read with the broken pair silently dropped.
func checkRequestText(r *http.Request) error {
	for _, name := range patternParams(r.Pattern) {
		if !utf8.ValidString(r.PathValue(name)) {
			return badRequest("path parameter %s: not valid UTF-8", name)
		}
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return badRequest("query: %v", err)
	}
	for k, vs := range q {
		if !utf8.ValidString(k) {
			return badRequest("query: a parameter name is not valid UTF-8")
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return badRequest("query parameter %s: not valid UTF-8", k)
			}
		}
	}
	return nil
}

// patternParams lists the wildcard names of a ServeMux pattern
// ("/v1/volume/csi/{id}/claims/{claim}": id, claim).
func patternParams(pattern string) []string {
	var names []string
	for _, seg := range strings.Split(pattern, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") && seg != "{$}" {
			names = append(names, strings.TrimSuffix(seg[1:len(seg)-1], "..."))
		}
	}
	return names
}

// apiErrorOf is the HTTP status, code and message an error is answered with.
func apiErrorOf(err error) *apiError {
	var ae *apiError
	if !errors.As(err, &ae) {
		st := status.Convert(errcode.Status(err))
		ae = &apiError{status: errcode.HTTPStatus(st.Code()), code: errcode.Name(st.Code()), msg: st.Message()}
	}
	return ae
}

// logServerError logs an answer in the 5xx range: it is the agent's or a
// server's fault, or the cluster's state, never the caller's input, so an
// operator must be able to find it.
func (rt *router) logServerError(r *http.Request, err error) {
	ae := apiErrorOf(err)
	if ae.status < 500 {
		return
	}
	rt.logger.Error("http request failed", "method", r.Method, "path", r.URL.EscapedPath(), "status", ae.status, "code", ae.code, "message", ae.msg)
}
