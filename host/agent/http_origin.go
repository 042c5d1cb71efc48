package agent

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"
)

// Cross-site requests and DNS rebinding. With ACL disabled nothing but
// these checks stands between a web page the operator visits and the API's
// writes (a job run through raw_exec runs commands), so every request from
// the network passes them first (SECURITY.md, "A web page in the
// operator's browser"):
//   - a browser's unsafe request from another origin (Sec-Fetch-Site:
//     cross-site or same-site, or an Origin that is not the Host) is
//     refused, by net/http's CrossOriginProtection; a client that is not a
//     browser sends neither header and passes (the CLI, curl, the Go
//     client);
//   - a browser's write (one carrying Origin or Sec-Fetch-Site) must have a
//     JSON body or no Content-Type, so no HTML form (text/plain, urlencoded,
//     multipart) can be one, even a same-origin one; a client that is not a
//     browser may label its JSON as it likes (`curl -d @job.json` sends
//     application/x-www-form-urlencoded, as Nomad's docs use it);
//   - on an agent bound to loopback, the Host must name loopback
//     (localhost, *.localhost, a loopback IP): a page whose name was
//     rebound to 127.0.0.1 is same-origin to the browser, and only its Host
//     gives it away.

// guardHTTP wraps the API's handler (routes) with the cross-origin and
// Host checks. loopback says the agent listens on loopback only.
func guardHTTP(h http.Handler, loopback bool) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusForbidden, code: "cross_origin_refused",
			msg: fmt.Sprintf("%s %s: cross-origin request refused: a browser sent it from another site (Origin %q, Sec-Fetch-Site %q); the agent's writes are taken only from its own pages and from clients that are not browsers",
				r.Method, r.URL.Path, r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site"))})
	}))
	h = nosniff(cop.Handler(h))
	if !loopback {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			writeError(w, &apiError{status: http.StatusForbidden, code: "host_refused",
				msg: fmt.Sprintf("Host %q refused: this agent listens on loopback and answers only requests naming it (localhost, 127.0.0.1, [::1]); a reverse proxy in front of it must pass such a Host, or bind the agent to another address", r.Host)})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// nosniff marks every answer as of its declared type: a browser never
// runs a JSON answer as a script (the gadget a page's script-src 'self'
// would otherwise allow).
func nosniff(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a request's Host names loopback: localhost
// or a name under .localhost (RFC 6761 keeps both on loopback), or a
// loopback IP, with any port. An empty Host (HTTP/1.0, no browser) passes.
func loopbackHost(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackListener reports whether addr (a listener's) is a loopback IP.
func loopbackListener(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// checkContentType refuses a browser's write whose body an HTML form could
// have sent: any Content-Type but JSON. A request with neither Origin nor
// Sec-Fetch-Site is not a browser's (every browser sends one of them on a
// POST, PUT or DELETE), and its body is read as JSON whatever its label. A
// body the handler streams (a snapshot restore) is not JSON and has checks
// of its own.
func checkContentType(r *http.Request, use bodyUse) error {
	if r.Method == http.MethodGet || r.Method == http.MethodHead || use == bodyStreamed {
		return nil
	}
	if r.Header.Get("Origin") == "" && r.Header.Get("Sec-Fetch-Site") == "" {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return &apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
		msg: fmt.Sprintf("%s %s: Content-Type %q refused: a request body is JSON, sent with Content-Type: application/json or none (curl: -H 'Content-Type: application/json')", r.Method, r.URL.Path, ct)}
}
