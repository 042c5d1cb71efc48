package server

import (
	"testing"
	"time"

	"berth.dev/berth/rpc/pb"
)

// TestGCDeletesTokensExpiredForAnHour: the leader's GC deletes a token
// once it has been expired for more than an hour by the server's clock,
// and keeps one expired less long, one not expired and one without TTL.
func TestGCDeletesTokensExpiredForAnHour(t *testing.T) {
	tc := newTestCluster(t, 1, withACL)
	s := tc.waitLeader()
	waitVersions(tc, s)
	c := pb.NewACLClient(tc.conn(s))
	boot, err := c.Bootstrap(ctx10s(t), &pb.ACLBootstrapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m := withToken(ctx10s(t), boot.GetSecretId())
	if _, err := c.PolicyUpsert(m, &pb.ACLPolicyUpsertRequest{Policy: &pb.ACLPolicy{Name: "ro", Rules: `job { policy = "read" }`}}); err != nil {
		t.Fatal(err)
	}
	accessor := map[string]string{}
	for name, ttl := range map[string]time.Duration{"short": time.Minute, "medium": 30 * time.Minute, "long": 10 * time.Hour, "forever": 0} {
		tok, err := c.TokenCreate(m, &pb.ACLTokenCreateRequest{Name: name, Policies: []string{"ro"}, TtlMs: ttl.Milliseconds()})
		if err != nil {
			t.Fatal(err)
		}
		accessor[name] = tok.GetToken().GetAccessorId()
	}
	left := func() map[string]bool {
		toks, err := s.State().ACLTokens(nil)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, tok := range toks {
			names[tok.GetName()] = true
		}
		return names
	}

	tc.clock.Advance(50 * time.Minute) // short expired 49m ago: kept
	if n, err := s.collectExpiredTokens(ctx10s(t)); err != nil || n != 0 {
		t.Fatalf("collected %d, %v; want 0 while no token is expired an hour", n, err)
	}
	tc.clock.Advance(20 * time.Minute) // short expired 69m ago, medium 40m ago
	if n, err := s.collectExpiredTokens(ctx10s(t)); err != nil || n != 1 {
		t.Fatalf("collected %d, %v; want 1", n, err)
	}
	got := left()
	if got["short"] || !got["medium"] || !got["long"] || !got["forever"] || !got["Bootstrap Token"] {
		t.Fatalf("tokens left %v, want all but short", got)
	}
	tc.clock.Advance(time.Hour)
	if n, err := s.collectExpiredTokens(ctx10s(t)); err != nil || n != 1 {
		t.Fatalf("collected %d, %v; want medium", n, err)
	}
	if got := left(); got["medium"] || !got["long"] || !got["forever"] {
		t.Fatalf("tokens left %v", got)
	}
	if _, err := c.TokenGet(m, &pb.ACLTokenGetRequest{AccessorId: accessor["short"]}); err == nil {
		t.Fatal("the collected token is still served")
	}
}
