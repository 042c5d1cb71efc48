package agent

import (
	"crypto/sha256"
	"sync"
	"time"

	"berth.dev/berth/host/authz"
)

// aclDecisionTTL is how long the agent remembers that a token may use a
// route, sparing a server round trip per request (Nomad's agents cache
// resolved tokens for 30 s). Every RPC a handler makes is checked by the
// servers at once, so a deleted token or a narrowed policy is refused
// there immediately; only the routes the agent answers alone (agent self,
// metrics, job parse) may serve a revoked token for up to this long.
const aclDecisionTTL = 10 * time.Second

// aclDecisionsMax bounds the remembered decisions; past it they are all
// forgotten.
const aclDecisionsMax = 4096

// aclDecisions remembers allowed decisions by the secret's hash and the
// need, until the TTL or the token's expiry, whichever is first. Refusals
// are not remembered.
type aclDecisions struct {
	mu  sync.Mutex
	now func() time.Time // nil: time.Now
	m   map[aclDecisionKey]time.Time
}

type aclDecisionKey struct {
	secret [sha256.Size]byte
	need   authz.Need
}

func (d *aclDecisions) clock() time.Time {
	if d.now != nil {
		return d.now()
	}
	return time.Now()
}

// allowed reports whether secret was allowed need and the decision is
// still fresh.
func (d *aclDecisions) allowed(secret string, need authz.Need) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := aclDecisionKey{sha256.Sum256([]byte(secret)), need}
	until, ok := d.m[k]
	if ok && d.clock().Before(until) {
		return true
	}
	delete(d.m, k)
	return false
}

// allow remembers that secret was allowed need; expires (unix ns, 0: never)
// is the token's expiry.
func (d *aclDecisions) allow(secret string, need authz.Need, expires int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	until := d.clock().Add(aclDecisionTTL)
	if expires != 0 && time.Unix(0, expires).Before(until) {
		until = time.Unix(0, expires)
	}
	if d.m == nil || len(d.m) >= aclDecisionsMax {
		d.m = map[aclDecisionKey]time.Time{}
	}
	d.m[aclDecisionKey{sha256.Sum256([]byte(secret)), need}] = until
}
