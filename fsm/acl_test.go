package fsm_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

func hashOf(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

func clientToken(id, secret string, policies ...string) *pb.ACLToken {
	return &pb.ACLToken{AccessorId: id, Name: id, Type: fsm.ACLTokenClient, Policies: policies, SecretHash: hashOf(secret), CreateTime: 100}
}

func applyErr(t *testing.T, f *fsm.FSM, index uint64, typ fsm.MessageType, msg proto.Message, want error) {
	t.Helper()
	res := applyAt(f, index, mustEncode(t, typ, msg))
	if !errors.Is(res.Err, want) {
		t.Fatalf("%s at %d: got %v, want %v", typ, index, res.Err, want)
	}
}

func TestACLPolicyUpsertAndDelete(t *testing.T) {
	f := fsm.New(testLogger(t))
	applyOK(t, f, 1, fsm.ACLPolicyUpsert, &pb.ACLPolicyUpsertCommand{Policies: []*pb.ACLPolicy{
		{Name: "readonly", Rules: `job { policy = "read" }`}, {Name: "anonymous", Rules: `agent { policy = "read" }`}}})
	applyOK(t, f, 2, fsm.ACLPolicyUpsert, &pb.ACLPolicyUpsertCommand{Policies: []*pb.ACLPolicy{
		{Name: "readonly", Rules: `job { policy = "write" }`, Description: "d"}}})
	st := f.State()
	p, err := st.ACLPolicy(nil, "readonly")
	if err != nil || p == nil {
		t.Fatalf("policy: %v %v", p, err)
	}
	if p.GetRules() != `job { policy = "write" }` || p.GetCreateIndex() != 1 || p.GetModifyIndex() != 2 {
		t.Errorf("updated policy: %v", p)
	}
	if all, _ := st.ACLPolicies(nil); len(all) != 2 || all[0].GetName() != "anonymous" {
		t.Errorf("policies: %v", all)
	}
	applyErr(t, f, 3, fsm.ACLPolicyUpsert, &pb.ACLPolicyUpsertCommand{Policies: []*pb.ACLPolicy{{Name: "ok"}, {}}}, fsm.ErrInvalidCommand)
	if p, _ := f.State().ACLPolicy(nil, "ok"); p != nil {
		t.Error("a refused upsert stored a policy")
	}
	applyOK(t, f, 4, fsm.ACLPolicyDelete, &pb.ACLPolicyDeleteCommand{Names: []string{"readonly", "never"}})
	if all, _ := f.State().ACLPolicies(nil); len(all) != 1 {
		t.Errorf("after delete: %v", all)
	}
	if idx, _ := f.State().Index(fsm.TableACLPolicies); idx != 4 {
		t.Errorf("table index %d, want 4", idx)
	}
}

func TestACLTokenUpsertKeepsSecretAndType(t *testing.T) {
	f := fsm.New(testLogger(t))
	tok := clientToken("acc-1", "s1", "readonly")
	tok.ExpirationTime = 500
	applyOK(t, f, 1, fsm.ACLTokenUpsert, &pb.ACLTokenUpsertCommand{Tokens: []*pb.ACLToken{tok}})
	// An update names the token and its new policies; whatever it says of
	// the secret, type and times is not taken.
	applyOK(t, f, 2, fsm.ACLTokenUpsert, &pb.ACLTokenUpsertCommand{Tokens: []*pb.ACLToken{{
		AccessorId: "acc-1", Name: "renamed", Type: fsm.ACLTokenManagement, Policies: []string{"a", "b"}, SecretHash: hashOf("other")}}})
	got, err := f.State().ACLToken(nil, "acc-1")
	if err != nil || got == nil {
		t.Fatal(got, err)
	}
	if got.GetName() != "renamed" || strings.Join(got.GetPolicies(), ",") != "a,b" || got.GetType() != fsm.ACLTokenClient ||
		!bytes.Equal(got.GetSecretHash(), hashOf("s1")) || got.GetCreateTime() != 100 || got.GetExpirationTime() != 500 ||
		got.GetCreateIndex() != 1 || got.GetModifyIndex() != 2 {
		t.Errorf("updated token: %v", got)
	}
	if byHash, _ := f.State().ACLTokenBySecretHash(nil, hashOf("s1")); byHash.GetAccessorId() != "acc-1" {
		t.Errorf("by hash: %v", byHash)
	}
	if byHash, _ := f.State().ACLTokenBySecretHash(nil, hashOf("other")); byHash != nil {
		t.Errorf("by another hash: %v", byHash)
	}
	applyOK(t, f, 3, fsm.ACLTokenDelete, &pb.ACLTokenDeleteCommand{AccessorIds: []string{"acc-1", "never"}})
	if got, _ := f.State().ACLToken(nil, "acc-1"); got != nil {
		t.Error("token not deleted")
	}
}

func TestACLTokenUpsertRefuses(t *testing.T) {
	f := fsm.New(testLogger(t))
	applyOK(t, f, 1, fsm.ACLTokenUpsert, &pb.ACLTokenUpsertCommand{Tokens: []*pb.ACLToken{clientToken("a", "s", "p")}})
	mgmtWithPolicy := clientToken("m", "sm", "p")
	mgmtWithPolicy.Type = fsm.ACLTokenManagement
	badType := clientToken("t", "st", "p")
	badType.Type = "root"
	for name, tok := range map[string]*pb.ACLToken{
		"no accessor":              {Type: fsm.ACLTokenClient, Policies: []string{"p"}, SecretHash: hashOf("x")},
		"no hash":                  {AccessorId: "h", Type: fsm.ACLTokenClient, Policies: []string{"p"}},
		"client without policy":    clientToken("c", "sc"),
		"management with a policy": mgmtWithPolicy,
		"unknown type":             badType,
	} {
		t.Run(name, func(t *testing.T) {
			applyErr(t, f, 2, fsm.ACLTokenUpsert, &pb.ACLTokenUpsertCommand{Tokens: []*pb.ACLToken{clientToken("ok", "sok", "p"), tok}}, fsm.ErrInvalidCommand)
			if got, _ := f.State().ACLToken(nil, "ok"); got != nil {
				t.Error("a refused command stored its first token")
			}
		})
	}
	applyErr(t, f, 3, fsm.ACLTokenUpsert, &pb.ACLTokenUpsertCommand{Tokens: []*pb.ACLToken{clientToken("b", "s", "p")}}, fsm.ErrDuplicateKey)
}

func TestACLBootstrapOnceThenReset(t *testing.T) {
	f := fsm.New(testLogger(t))
	mgmt := func(id, secret string) *pb.ACLToken {
		return &pb.ACLToken{AccessorId: id, Type: fsm.ACLTokenManagement, SecretHash: hashOf(secret), Name: "Bootstrap Token"}
	}
	applyErr(t, f, 1, fsm.ACLBootstrap, &pb.ACLBootstrapCommand{Token: clientToken("c", "sc", "p")}, fsm.ErrInvalidCommand)
	applyOK(t, f, 2, fsm.ACLBootstrap, &pb.ACLBootstrapCommand{Token: mgmt("m1", "s1")})
	if idx, _ := f.State().ACLBootstrapIndex(); idx != 2 {
		t.Fatalf("bootstrap index %d, want 2", idx)
	}
	res := applyAt(f, 3, mustEncode(t, fsm.ACLBootstrap, &pb.ACLBootstrapCommand{Token: mgmt("m2", "s2")}))
	if !errors.Is(res.Err, fsm.ErrACLBootstrapped) || !strings.Contains(res.Err.Error(), "reset index: 2") {
		t.Fatalf("second bootstrap: %v", res.Err)
	}
	applyErr(t, f, 4, fsm.ACLBootstrap, &pb.ACLBootstrapCommand{Token: mgmt("m2", "s2"), ResetIndex: 1}, fsm.ErrACLBootstrapped)
	applyOK(t, f, 5, fsm.ACLBootstrap, &pb.ACLBootstrapCommand{Token: mgmt("m2", "s2"), ResetIndex: 2})
	// The reset is spent: the same reset index works once.
	applyErr(t, f, 6, fsm.ACLBootstrap, &pb.ACLBootstrapCommand{Token: mgmt("m3", "s3"), ResetIndex: 2}, fsm.ErrACLBootstrapped)
	if all, _ := f.State().ACLTokens(nil); len(all) != 2 {
		t.Errorf("tokens: %v", all)
	}
}

// TestACLStateSurvivesSnapshot restores ACL state into a fresh FSM and
// compares every row and table index.
func TestACLStateSurvivesSnapshot(t *testing.T) {
	src := fsm.New(testLogger(t))
	applyOK(t, src, 1, fsm.ACLPolicyUpsert, &pb.ACLPolicyUpsertCommand{Policies: []*pb.ACLPolicy{{Name: "readonly", Rules: `job { policy = "read" }`}}})
	applyOK(t, src, 2, fsm.ACLBootstrap, &pb.ACLBootstrapCommand{Token: &pb.ACLToken{AccessorId: "m", Type: fsm.ACLTokenManagement, SecretHash: hashOf("sm")}})
	applyOK(t, src, 3, fsm.ACLTokenUpsert, &pb.ACLTokenUpsertCommand{Tokens: []*pb.ACLToken{clientToken("c", "sc", "readonly")}})
	dst := fsm.New(testLogger(t))
	if err := restoreBytes(dst, snapshotBytes(t, src)); err != nil {
		t.Fatal(err)
	}
	a, b := src.State(), dst.State()
	pa, _ := a.ACLPolicies(nil)
	pb2, _ := b.ACLPolicies(nil)
	ta, _ := a.ACLTokens(nil)
	tb, _ := b.ACLTokens(nil)
	if len(pb2) != 1 || !proto.Equal(pa[0], pb2[0]) || len(tb) != 2 || !proto.Equal(ta[0], tb[0]) || !proto.Equal(ta[1], tb[1]) {
		t.Errorf("restored ACL state differs: %v %v", pb2, tb)
	}
	if tok, _ := b.ACLTokenBySecretHash(nil, hashOf("sc")); tok.GetAccessorId() != "c" {
		t.Errorf("the secret index was not rebuilt: %v", tok)
	}
	for _, tbl := range []string{fsm.TableACLPolicies, fsm.TableACLTokens, fsm.TableACLBootstrap} {
		ia, _ := a.Index(tbl)
		ib, _ := b.Index(tbl)
		if ia == 0 || ia != ib {
			t.Errorf("%s index %d, restored %d", tbl, ia, ib)
		}
	}
	if idx, _ := b.ACLBootstrapIndex(); idx != 2 {
		t.Errorf("bootstrap index %d after restore", idx)
	}
}
