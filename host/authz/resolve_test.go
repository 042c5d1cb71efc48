package authz

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/acl"
	"berth.dev/berth/rpc/pb"
)

// stateWithPolicy is a state store holding policy name with rules, written
// at raft index idx.
func stateWithPolicy(t *testing.T, idx uint64, name, rules string) *fsm.StateStore {
	t.Helper()
	f := fsm.New(hclog.NewNullLogger())
	data, err := fsm.Encode(fsm.ACLPolicyUpsert, &pb.ACLPolicyUpsertCommand{Policies: []*pb.ACLPolicy{{Name: name, Rules: rules}}})
	if err != nil {
		t.Fatal(err)
	}
	if res := f.Apply(&raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data}); res != nil {
		if err, ok := res.(error); ok {
			t.Fatal(err)
		}
	}
	return f.State()
}

// TestResolverPolicyCacheComparesRules: a state with the same policy name
// and modify index but other rules (a restored snapshot) is not answered
// from the cache.
func TestResolverPolicyCacheComparesRules(t *testing.T) {
	read := stateWithPolicy(t, 5, acl.AnonymousPolicy, `job { policy = "read" }`)
	deny := stateWithPolicy(t, 5, acl.AnonymousPolicy, `job { policy = "deny" }`)
	if p, _ := read.ACLPolicy(nil, acl.AnonymousPolicy); p.GetModifyIndex() != 5 {
		t.Fatalf("modify index %d, want 5", p.GetModifyIndex())
	}
	cur := read
	r := NewResolver(func() *fsm.StateStore { return cur }, time.Now)
	c, err := r.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ACL.Check(acl.Job, acl.ReadJob); err != nil {
		t.Fatalf("read policy: %v", err)
	}
	cur = deny
	c, err = r.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ACL.Check(acl.Job, acl.ReadJob); err == nil {
		t.Fatal("the deny policy at the same index was served from the cache of the read one")
	}
}
