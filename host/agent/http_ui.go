package agent

import (
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/metadata"

	"berth.dev/berth/host/ui"
)

// handleUI mounts the web UI (host/ui) at /ui/ and redirects / there. Its
// pages read through api, the API's own handler, in process, with the
// token of the page's request: the UI's routes are public shells in the
// authorization table, the reads behind them are the API's.
func (a *Agent) handleUI(handle func(string, map[string]handlerFunc), api http.Handler) {
	h, err := ui.New(api, a.logger.Named("ui"))
	if err != nil {
		panic(fmt.Sprintf("agent routes: %v", err)) // embedded templates: a build bug
	}
	for _, r := range h.Routes() {
		serve := r.Serve
		handle(r.Pattern, map[string]handlerFunc{"GET": func(w http.ResponseWriter, r *http.Request) error {
			// The router put the page request's token on its context for
			// RPCs; the UI's reads are API requests of their own, which put
			// it there again: two would be refused as two tokens.
			serve(w, r.WithContext(metadata.NewOutgoingContext(r.Context(), metadata.MD{})))
			return nil
		}})
	}
}

// isUIPage reports whether a route pattern is one of the web UI's
// (host/ui): the agent's root redirect and everything under /ui/.
func isUIPage(pattern string) bool {
	return pattern == "/{$}" || strings.HasPrefix(pattern, "/ui/")
}
