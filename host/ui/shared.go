package ui

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"berth.dev/berth/rpc/api"
)

// sharedLoads shares a page's load among renders of the same page with
// the same token: every tab open on a page wakes on the same change, and
// without it each would read the whole page again (the overview reads
// every node and job). A render joins a load in flight only if that load
// started from indexes at least its own (each a state the load's reads
// see at least), so it shows at least the state it woke on; else it
// starts its own.
type sharedLoads struct {
	mu       sync.Mutex
	inFlight map[string]*sharedLoad
}

type sharedLoad struct {
	idx   []uint64
	done  chan struct{}
	title string
	data  any
	err   error
}

// covers reports whether a load from indexes have serves a render that
// woke at want.
func covers(have, want []uint64) bool {
	if len(have) != len(want) {
		return false
	}
	for i := range want {
		if have[i] < want[i] {
			return false
		}
	}
	return true
}

// load runs p's load for r, or joins one in flight for the same page and
// token from indexes at least idx. The data is only read by the
// templates, so one load serves every render. A caller that goes away
// stops waiting; the load goes on for the others.
func (s *sharedLoads) load(ctx context.Context, idx []uint64, p *page, c *api.Client, r *http.Request, secret string) (string, any, error) {
	q := r.URL.Query()
	q.Del("fragment")
	q.Del("index")
	key := strings.Join([]string{p.tmpl, r.URL.Path, q.Encode(), secret}, "\x00")
	s.mu.Lock()
	l := s.inFlight[key]
	if l == nil || !covers(l.idx, idx) {
		l = &sharedLoad{idx: idx, done: make(chan struct{})}
		if s.inFlight == nil {
			s.inFlight = map[string]*sharedLoad{}
		}
		s.inFlight[key] = l
		go func() {
			l.title, l.data, l.err = p.load(context.WithoutCancel(ctx), c, r)
			s.mu.Lock()
			if s.inFlight[key] == l {
				delete(s.inFlight, key)
			}
			s.mu.Unlock()
			close(l.done)
		}()
	}
	s.mu.Unlock()
	select {
	case <-l.done:
		return l.title, l.data, l.err
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
}
