package ui

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/acl"
	"berth.dev/berth/rpc/api"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// ContentSecurityPolicy is sent with every answer of the UI: no inline
// script or style, nothing from another origin, never framed.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; object-src 'none'; base-uri 'none'; form-action 'self'"

// DefaultWait is how long a live fragment request waits for a change
// before it answers with the page as it is (the script then asks again).
const DefaultWait = 2 * time.Minute

// Handler serves the UI's routes.
type Handler struct {
	api    http.Handler
	logger hclog.Logger
	pages  map[string]*template.Template
	errTpl *template.Template
	// Wait bounds one live fragment request's wait (DefaultWait when 0).
	Wait time.Duration
	// now is the clock relative times are written against.
	now func() time.Time
	// loads shares a page's load among its concurrent renders.
	loads sharedLoads
}

// New returns the UI over apiHandler, the agent's HTTP API handler, which
// serves every read and enforces every need the API has.
func New(apiHandler http.Handler, logger hclog.Logger) (*Handler, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	h := &Handler{api: apiHandler, logger: logger, pages: map[string]*template.Template{}, now: time.Now}
	for _, p := range pageList {
		t, err := h.parse(p.tmpl)
		if err != nil {
			return nil, err
		}
		h.pages[p.tmpl] = t
	}
	t, err := h.parse("error")
	if err != nil {
		return nil, err
	}
	h.errTpl = t
	return h, nil
}

func (h *Handler) parse(name string) (*template.Template, error) {
	t, err := template.New(name).Funcs(h.funcs()).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
	if err != nil {
		return nil, fmt.Errorf("ui: template %s: %w", name, err)
	}
	return t, nil
}

// Route is one of the UI's routes: a ServeMux pattern, GET only.
type Route struct {
	Pattern string
	Serve   http.HandlerFunc
}

// Routes lists the UI's routes, the agent's root redirect first.
func (h *Handler) Routes() []Route {
	rs := []Route{
		{"/{$}", h.redirect},
		{"/ui/{$}", h.servePage(pageOverview)},
		{"/ui/static/{file}", h.serveStatic},
		{"/ui/", h.notFound},
	}
	for _, p := range pageList {
		if p.pattern != "" {
			rs = append(rs, Route{p.pattern, h.servePage(p)})
		}
	}
	return rs
}

func (h *Handler) redirect(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header())
	http.Redirect(w, r, "/ui/", http.StatusTemporaryRedirect)
}

func setSecurityHeaders(hd http.Header) {
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
}

func (h *Handler) serveStatic(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header())
	name := r.PathValue("file")
	b, err := fs.ReadFile(staticFS, "static/"+name)
	if err != nil || strings.Contains(name, "/") {
		h.notFound(w, r)
		return
	}
	switch path.Ext(name) {
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case ".svg":
		w.Header().Set("Content-Type", "image/svg+xml")
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	// The files change with the binary only; a short cache keeps an
	// upgraded agent's pages consistent.
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(b)
}

func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.writeError(w, r, &api.Error{StatusCode: http.StatusNotFound, Code: "not_found",
		Message: fmt.Sprintf("the UI has no page %s", r.URL.Path)}, false)
}

// frame is what the layout renders.
type frame struct {
	Title string
	// Nav is the section the page belongs to (the nav link marked current).
	Nav string
	// Live marks a page the script keeps current.
	Live bool
	// Index is the opaque index the script echoes back.
	Index string
	Data  any
	Err   *pageError
	Now   time.Time
}

// pageError is an API error as a page shows it.
type pageError struct {
	Status  int
	Code    string
	Message string
}

// page is one kind of page.
type page struct {
	tmpl    string
	pattern string
	nav     string
	// watch names the reads that wake a live fragment.
	watch func(r *http.Request) []watchRead
	// load reads what the page shows; title is the page's heading.
	load func(ctx context.Context, c *api.Client, r *http.Request) (title string, data any, err error)
}

// watchRead is one read a live page blocks on: a cheap read (one item)
// made with q's index.
type watchRead func(ctx context.Context, c *api.Client, q *api.QueryOptions) (*api.QueryMeta, error)

func (h *Handler) servePage(p *page) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-store")
		// A Basic Authorization is a reverse proxy's, not a token.
		secret, err := acl.FromPageHeader(r.Header)
		if err != nil {
			h.writeError(w, r, &api.Error{StatusCode: http.StatusBadRequest, Code: "invalid_argument", Message: err.Error()}, isFragment(r))
			return
		}
		c := api.NewInProcessClient(h.api, secret)
		ctx := r.Context()
		watches := p.watch(r)
		prev, blocking := parseIndex(r.URL.Query().Get("index"), len(watches))
		var idx []uint64
		if blocking && isFragment(r) {
			idx = h.waitChange(ctx, c, watches, prev)
		} else {
			idx = readIndexes(ctx, c, watches)
		}
		if ctx.Err() != nil {
			return // the caller went away
		}
		title, data, err := h.loads.load(ctx, idx, p, c, r, secret)
		if ctx.Err() != nil {
			return // the caller went away while the page was read
		}
		if err != nil {
			h.writeError(w, r, err, isFragment(r))
			return
		}
		f := &frame{Title: title, Nav: p.nav, Live: true, Index: formatIndex(idx), Data: data, Now: h.now()}
		w.Header().Set("X-Berth-Index", f.Index)
		h.render(w, h.pages[p.tmpl], r, http.StatusOK, f)
	}
}

func isFragment(r *http.Request) bool { return r.URL.Query().Get("fragment") == "main" }

// render writes f with t: the whole page, or its live fragment.
func (h *Handler) render(w http.ResponseWriter, t *template.Template, r *http.Request, status int, f *frame) {
	name := "layout"
	if isFragment(r) {
		name = "fragment"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, f); err != nil {
		h.logger.Error("rendering a UI page", "path", r.URL.Path, "error", err)
		http.Error(w, "rendering the page failed; see the agent's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// writeError renders err (an API error keeps its status, code and message:
// a 403 names the capability the token lacks).
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error, fragment bool) {
	setSecurityHeaders(w.Header())
	w.Header().Set("Cache-Control", "no-store")
	pe := &pageError{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
	var ae *api.Error
	if errors.As(err, &ae) {
		pe = &pageError{Status: ae.StatusCode, Code: ae.Code, Message: ae.Message}
	}
	if pe.Status >= 500 {
		h.logger.Warn("UI page read failed", "path", r.URL.Path, "error", err)
	}
	// Live with no index: a token entered in the page reads it again.
	h.render(w, h.errTpl, r, pe.Status, &frame{Title: http.StatusText(pe.Status), Err: pe, Live: true, Now: h.now()})
}

// parseIndex reads the opaque index ("12.40.7", one per watched read).
func parseIndex(s string, n int) ([]uint64, bool) {
	if s == "" || n == 0 {
		return nil, false
	}
	parts := strings.Split(s, ".")
	if len(parts) != n {
		return nil, false
	}
	out := make([]uint64, n)
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

func formatIndex(idx []uint64) string {
	s := make([]string, len(idx))
	for i, v := range idx {
		s[i] = strconv.FormatUint(v, 10)
	}
	return strings.Join(s, ".")
}

// readIndexes makes the watched reads without blocking, for the index the
// next live request waits from. They are read before the page's data: a
// change between the two shows on this page and wakes the next wait, at
// worst one render too many, never one too few.
func readIndexes(ctx context.Context, c *api.Client, watches []watchRead) []uint64 {
	idx := make([]uint64, len(watches))
	done := make(chan struct{}, len(watches))
	for i, wr := range watches {
		go func() {
			defer func() { done <- struct{}{} }()
			if m, err := wr(ctx, c, &api.QueryOptions{PerPage: 1}); err == nil {
				idx[i] = m.LastIndex
			}
		}()
	}
	for range watches {
		<-done
	}
	return idx
}

// waitChange blocks on every watched read at once, each from its own
// index, until one answers with a newer one (or its wait ends), and
// returns the indexes to wait from next: the answer's for that read, the
// previous ones for the others (if they changed too, the next wait answers
// at once). A read that fails is left out of the wait: a failure answers
// at once, and a page that shows it as one part's error (the overview
// under a token lacking one capability) would otherwise be read again in
// a tight loop. When every read failed, the wait lasts its whole length
// if they were refused (a 4xx: only a new token changes that, and the
// script starts over with one), or retryFailed otherwise (an outage).
func (h *Handler) waitChange(ctx context.Context, c *api.Client, watches []watchRead, prev []uint64) []uint64 {
	wait := h.Wait
	if wait <= 0 {
		wait = DefaultWait
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		i     int
		index uint64
		err   error
	}
	answers := make(chan answer, len(watches))
	for i, wr := range watches {
		go func() {
			m, err := wr(ctx, c, &api.QueryOptions{PerPage: 1, WaitIndex: max(prev[i], 1), WaitTime: wait})
			a := answer{i: i, err: err}
			if err == nil {
				a.index = m.LastIndex
			}
			answers <- a
		}()
	}
	out := append([]uint64(nil), prev...)
	refusedOnly := true
	for range watches {
		select {
		case a := <-answers:
			if a.err == nil {
				out[a.i] = a.index
				return out
			}
			var ae *api.Error
			if !errors.As(a.err, &ae) || ae.StatusCode/100 != 4 {
				refusedOnly = false
			}
		case <-ctx.Done():
			return out
		}
	}
	// Every read failed: answer after a pause, not at once.
	pause := wait
	if !refusedOnly {
		pause = min(wait, retryFailed)
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return out
}

// retryFailed is how long a live request whose every watched read failed
// for another reason than a refusal (no leader, a server down) waits
// before it answers, so the page shows the outage end soon after it does.
const retryFailed = 5 * time.Second
