package agent

import (
	"testing"
	"time"

	"berth.dev/berth/host/authz"
	"berth.dev/berth/internal/acl"
)

func TestACLDecisionsExpire(t *testing.T) {
	now := time.Unix(1000, 0)
	d := &aclDecisions{now: func() time.Time { return now }}
	read := authz.Needs(acl.Job, acl.ReadJob)
	submit := authz.Needs(acl.Job, acl.SubmitJob)
	if d.allowed("s", read) {
		t.Fatal("allowed before any decision")
	}
	d.allow("s", read, 0)
	if !d.allowed("s", read) || d.allowed("s", submit) || d.allowed("t", read) {
		t.Fatal("a decision is remembered for another need or secret, or not at all")
	}
	now = now.Add(aclDecisionTTL)
	if d.allowed("s", read) {
		t.Fatal("a decision outlived its TTL")
	}
	// A token expiring sooner than the TTL bounds the decision.
	d.allow("s", read, now.Add(time.Second).UnixNano())
	now = now.Add(time.Second)
	if d.allowed("s", read) {
		t.Fatal("a decision outlived its token")
	}
	for i := range aclDecisionsMax + 1 {
		d.allow(string(rune(i)), read, 0)
	}
	if len(d.m) > aclDecisionsMax {
		t.Fatalf("%d decisions kept, over %d", len(d.m), aclDecisionsMax)
	}
}
