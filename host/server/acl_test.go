package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"berth.dev/berth/host/authz"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func withACL(c *testConfig) { c.ACLEnabled = true }

func withToken(ctx context.Context, secret string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-berth-token", secret)
}

// TestEveryRPCMethodIsInTheAuthorizationTable walks every method the
// server registers and fails on one the table does not declare.
func TestEveryRPCMethodIsInTheAuthorizationTable(t *testing.T) {
	tc := newTestCluster(t, 1)
	n := 0
	for svc, info := range tc.servers[0].grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			n++
			full := "/" + svc + "/" + m.Name
			if _, ok := authz.Method(full); !ok {
				t.Errorf("%s declares no need in host/authz's table", full)
			}
		}
	}
	if n < 70 {
		t.Errorf("walked %d methods: the server registers more", n)
	}
}

func wantACLCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want %s", err, code)
	}
	if contains != "" && !strings.Contains(status.Convert(err).Message(), contains) {
		t.Fatalf("message %q lacks %q", status.Convert(err).Message(), contains)
	}
}

// waitToken waits until every live server resolves secret, so a call to a
// follower does not race the token's apply.
func waitToken(tc *testCluster, secret string) {
	tc.t.Helper()
	testutil.WaitFor(tc.t, 10*time.Second, func() error {
		for _, s := range tc.live() {
			if _, err := s.aclResolver().Resolve(secret); err != nil {
				return err
			}
		}
		return nil
	})
}

// waitVersions waits until every server has recorded its version: the
// ACL commands wait for it (the gate).
func waitVersions(tc *testCluster, leader *Server) {
	tc.t.Helper()
	testutil.WaitFor(tc.t, 10*time.Second, func() error {
		ms, err := leader.State().Servers(nil)
		if err != nil {
			return err
		}
		if len(ms) != len(tc.live()) {
			return fmt.Errorf("%d servers recorded", len(ms))
		}
		for _, m := range ms {
			if m.GetVersion() == "" {
				return fmt.Errorf("server %s has no version yet", m.GetName())
			}
		}
		return nil
	})
}

func TestACLEnforcedAcrossTheCluster(t *testing.T) {
	tc := newTestCluster(t, 3, withACL)
	leader := tc.waitLeader()
	waitVersions(tc, leader)
	follower := tc.followers(leader)[0]
	jobs := func(s *Server) pb.JobsClient { return pb.NewJobsClient(tc.conn(s)) }
	aclc := func(s *Server) pb.ACLClient { return pb.NewACLClient(tc.conn(s)) }

	// No token and no anonymous policy: nothing but status and bootstrap.
	_, err := jobs(follower).List(ctx10s(t), &pb.JobListRequest{})
	wantACLCode(t, err, codes.PermissionDenied, `"list-jobs"`)
	if _, err := pb.NewStatusClient(tc.conn(follower)).Leader(ctx10s(t), &pb.LeaderRequest{}); err != nil {
		t.Fatal(err)
	}

	// Bootstrap through a follower (forwarded to the leader), once.
	boot, err := aclc(follower).Bootstrap(ctx10s(t), &pb.ACLBootstrapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	mgmt := boot.GetSecretId()
	if len(mgmt) != 64 || boot.GetToken().GetType() != "management" {
		t.Fatalf("bootstrap answered %v", boot)
	}
	_, err = aclc(leader).Bootstrap(ctx10s(t), &pb.ACLBootstrapRequest{})
	wantACLCode(t, err, codes.FailedPrecondition, "reset index")
	waitToken(tc, mgmt)

	// The management token writes policies and tokens, through a follower:
	// the forwarded call carries the token to the leader.
	m := withToken(ctx10s(t), mgmt)
	for name, rules := range map[string]string{
		"readonly": `job { policy = "read" }`,
		"deployer": `job { policy = "write" }`,
	} {
		if _, err := aclc(follower).PolicyUpsert(m, &pb.ACLPolicyUpsertRequest{Policy: &pb.ACLPolicy{Name: name, Rules: rules}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = aclc(leader).PolicyUpsert(m, &pb.ACLPolicyUpsertRequest{Policy: &pb.ACLPolicy{Name: "bad", Rules: "job {\n  policy = \"admin\"\n}\n"}})
	wantACLCode(t, err, codes.InvalidArgument, "policy bad:2:12: job.policy")
	ro, err := aclc(follower).TokenCreate(m, &pb.ACLTokenCreateRequest{Name: "ro", Policies: []string{"readonly"}})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := aclc(leader).TokenCreate(m, &pb.ACLTokenCreateRequest{Name: "dep", Policies: []string{"deployer"}})
	if err != nil {
		t.Fatal(err)
	}
	short, err := aclc(leader).TokenCreate(m, &pb.ACLTokenCreateRequest{Name: "short", Policies: []string{"readonly"}, TtlMs: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	_, err = aclc(leader).TokenCreate(m, &pb.ACLTokenCreateRequest{Name: "x", Policies: []string{"missing"}})
	wantACLCode(t, err, codes.NotFound, `"missing"`)
	for _, s := range []string{ro.GetSecretId(), dep.GetSecretId(), short.GetSecretId()} {
		waitToken(tc, s)
	}

	// A read-only token reads and cannot write, on any server.
	r := withToken(ctx10s(t), ro.GetSecretId())
	if _, err := jobs(follower).List(r, &pb.JobListRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = jobs(follower).Register(r, &pb.JobRegisterRequest{Job: serviceJob("web", 1)})
	wantACLCode(t, err, codes.PermissionDenied, `capability "submit-job" on job is required`)
	// Neither may it manage ACLs, nor restore or remove anything.
	_, err = aclc(follower).TokenList(r, &pb.ACLTokenListRequest{})
	wantACLCode(t, err, codes.PermissionDenied, "a management token is required")
	_, err = pb.NewOperatorClient(tc.conn(leader)).RemovePeer(r, &pb.RemovePeerRequest{Id: follower.id})
	wantACLCode(t, err, codes.PermissionDenied, `"write" on operator`)

	// A job writer without csi-mount-volume submits a job, but not one
	// that mounts a volume.
	d := withToken(ctx10s(t), dep.GetSecretId())
	_, err = jobs(follower).Register(d, &pb.JobRegisterRequest{Job: volumeJob("db", 1)})
	wantACLCode(t, err, codes.PermissionDenied, `capability "csi-mount-volume" on volume is required`)
	// Forwarded to the leader: a leadership change on a loaded machine
	// answers Unavailable ("retry"), which every client retries.
	testutil.WaitFor(t, 15*time.Second, func() error {
		_, err := jobs(follower).Register(withToken(ctx10s(t), dep.GetSecretId()), &pb.JobRegisterRequest{Job: serviceJob("web", 1)})
		if status.Code(err) == codes.Unavailable {
			return err
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})

	// Unknown and malformed tokens: Unauthenticated.
	_, err = jobs(leader).List(withToken(ctx10s(t), strings.Repeat("ab", 32)), &pb.JobListRequest{})
	wantACLCode(t, err, codes.Unauthenticated, "not found")
	_, err = jobs(leader).List(withToken(ctx10s(t), "not-a-secret"), &pb.JobListRequest{})
	wantACLCode(t, err, codes.Unauthenticated, "malformed")

	// Token self names the caller's own token, and needs one.
	self, err := aclc(follower).TokenSelf(r, &pb.ACLTokenSelfRequest{})
	if err != nil || self.GetToken().GetAccessorId() != ro.GetToken().GetAccessorId() {
		t.Fatalf("self: %v %v", self, err)
	}
	_, err = aclc(follower).TokenSelf(ctx10s(t), &pb.ACLTokenSelfRequest{})
	wantACLCode(t, err, codes.PermissionDenied, "needs a token")

	// An anonymous policy governs calls without a token.
	if _, err := aclc(leader).PolicyUpsert(m, &pb.ACLPolicyUpsertRequest{Policy: &pb.ACLPolicy{Name: "anonymous", Rules: `job { policy = "read" }`}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		_, err := jobs(follower).List(ctx10s(t), &pb.JobListRequest{})
		return err
	})

	// The short token expires with the servers' clock.
	if _, err := jobs(leader).List(withToken(ctx10s(t), short.GetSecretId()), &pb.JobListRequest{}); err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(61 * time.Second)
	_, err = jobs(leader).List(withToken(ctx10s(t), short.GetSecretId()), &pb.JobListRequest{})
	wantACLCode(t, err, codes.Unauthenticated, "expired")

	// A new leader knows every token and policy.
	if err := leader.Shutdown(); err != nil {
		t.Fatal(err)
	}
	next := tc.waitLeader(leader)
	if _, err := jobs(next).List(withToken(ctx10s(t), ro.GetSecretId()), &pb.JobListRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = jobs(next).Register(withToken(ctx10s(t), ro.GetSecretId()), &pb.JobRegisterRequest{Job: serviceJob("web2", 1)})
	wantACLCode(t, err, codes.PermissionDenied, `"submit-job"`)
	if _, err := aclc(next).TokenDelete(withToken(ctx10s(t), mgmt), &pb.ACLTokenDeleteRequest{AccessorId: ro.GetToken().GetAccessorId()}); err != nil {
		t.Fatal(err)
	}
	_, err = jobs(next).List(withToken(ctx10s(t), ro.GetSecretId()), &pb.JobListRequest{})
	wantACLCode(t, err, codes.Unauthenticated, "not found")
}

// TestACLBootstrapReset follows the documented reset: the refusal names the
// reset index, written into the reset file of the leader's data dir; the
// next bootstrap succeeds once.
func TestACLBootstrapReset(t *testing.T) {
	dir := t.TempDir()
	tc := newTestCluster(t, 1, withACL, func(c *testConfig) { c.DataDir = dir })
	s := tc.waitLeader()
	waitVersions(tc, s)
	c := pb.NewACLClient(tc.conn(s))
	first, err := c.Bootstrap(ctx10s(t), &pb.ACLBootstrapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Bootstrap(ctx10s(t), &pb.ACLBootstrapRequest{})
	wantACLCode(t, err, codes.FailedPrecondition, filepath.Join(dir, "server", ACLResetFileName))
	idx := first.GetMeta().GetIndex()
	if !strings.Contains(status.Convert(err).Message(), "reset index: "+strconv.FormatUint(idx, 10)) {
		t.Fatalf("refusal %q does not name reset index %d", status.Convert(err).Message(), idx)
	}
	reset := filepath.Join(dir, "server", ACLResetFileName)
	if err := os.WriteFile(reset, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = c.Bootstrap(ctx10s(t), &pb.ACLBootstrapRequest{})
	wantACLCode(t, err, codes.FailedPrecondition, "holds \"nope\"")
	if err := os.WriteFile(reset, []byte(strconv.FormatUint(idx, 10)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	second, err := c.Bootstrap(ctx10s(t), &pb.ACLBootstrapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if second.GetSecretId() == first.GetSecretId() {
		t.Fatal("the reset bootstrap answered the old secret")
	}
	if _, err := os.Stat(reset); !os.IsNotExist(err) {
		t.Errorf("the reset file was not removed: %v", err)
	}
	_, err = c.Bootstrap(ctx10s(t), &pb.ACLBootstrapRequest{})
	wantACLCode(t, err, codes.FailedPrecondition, "reset index")
}

// TestACLDisabledChecksNothing: without acl.enabled no token is asked for.
func TestACLDisabledChecksNothing(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.waitLeader()
	if _, err := pb.NewJobsClient(tc.conn(s)).List(ctx10s(t), &pb.JobListRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewJobsClient(tc.conn(s)).List(withToken(ctx10s(t), "garbage"), &pb.JobListRequest{}); err != nil {
		t.Fatal(err)
	}
}

// TestACLMethodsRefusedWhileDisabled: without acl.enabled every ACL method
// but Authorize answers FailedPrecondition "ACL support disabled", so no
// one mints a management token before ACL is turned on.
func TestACLMethodsRefusedWhileDisabled(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.waitLeader()
	waitVersions(tc, s)
	c := pb.NewACLClient(tc.conn(s))
	ctx := ctx10s(t)
	calls := map[string]func() error{
		"Bootstrap": func() error { _, err := c.Bootstrap(ctx, &pb.ACLBootstrapRequest{}); return err },
		"PolicyUpsert": func() error {
			_, err := c.PolicyUpsert(ctx, &pb.ACLPolicyUpsertRequest{Policy: &pb.ACLPolicy{Name: "p", Rules: "job { policy = \"read\" }"}})
			return err
		},
		"PolicyDelete": func() error { _, err := c.PolicyDelete(ctx, &pb.ACLPolicyDeleteRequest{Name: "p"}); return err },
		"PolicyGet":    func() error { _, err := c.PolicyGet(ctx, &pb.ACLPolicyGetRequest{Name: "p"}); return err },
		"PolicyList":   func() error { _, err := c.PolicyList(ctx, &pb.ACLPolicyListRequest{}); return err },
		"TokenCreate":  func() error { _, err := c.TokenCreate(ctx, &pb.ACLTokenCreateRequest{Type: "management"}); return err },
		"TokenUpdate":  func() error { _, err := c.TokenUpdate(ctx, &pb.ACLTokenUpdateRequest{AccessorId: "x"}); return err },
		"TokenDelete":  func() error { _, err := c.TokenDelete(ctx, &pb.ACLTokenDeleteRequest{AccessorId: "x"}); return err },
		"TokenGet":     func() error { _, err := c.TokenGet(ctx, &pb.ACLTokenGetRequest{AccessorId: "x"}); return err },
		"TokenList":    func() error { _, err := c.TokenList(ctx, &pb.ACLTokenListRequest{}); return err },
		"TokenSelf": func() error {
			_, err := c.TokenSelf(withToken(ctx, strings.Repeat("a", 64)), &pb.ACLTokenSelfRequest{})
			return err
		},
	}
	for _, m := range pb.ACL_ServiceDesc.Methods {
		if m.MethodName == "Authorize" {
			continue
		}
		call, ok := calls[m.MethodName]
		if !ok {
			t.Errorf("ACL.%s is not tried here", m.MethodName)
			continue
		}
		err := call()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "ACL support disabled") {
			t.Errorf("ACL.%s with ACL off: %v, want FailedPrecondition \"ACL support disabled\"", m.MethodName, err)
		}
	}
	if _, err := c.Authorize(ctx, &pb.ACLAuthorizeRequest{Kind: "token"}); err != nil {
		t.Errorf("Authorize with ACL off: %v, want allowed", err)
	}
}

// TestACLTokenWritesNeedManagement: an operator-write token may not mint
// a management token, nor write policies or tokens at all (Nomad's rule:
// managing ACLs needs a management token).
func TestACLTokenWritesNeedManagement(t *testing.T) {
	tc := newTestCluster(t, 1, withACL)
	s := tc.waitLeader()
	waitVersions(tc, s)
	c := pb.NewACLClient(tc.conn(s))
	boot, err := c.Bootstrap(ctx10s(t), &pb.ACLBootstrapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m := withToken(ctx10s(t), boot.GetSecretId())
	if _, err := c.PolicyUpsert(m, &pb.ACLPolicyUpsertRequest{Policy: &pb.ACLPolicy{Name: "op", Rules: `operator { policy = "write" }`}}); err != nil {
		t.Fatal(err)
	}
	op, err := c.TokenCreate(m, &pb.ACLTokenCreateRequest{Name: "op", Policies: []string{"op"}})
	if err != nil {
		t.Fatal(err)
	}
	o := withToken(ctx10s(t), op.GetSecretId())
	_, err = c.TokenCreate(o, &pb.ACLTokenCreateRequest{Name: "escalated", Type: "management"})
	wantACLCode(t, err, codes.PermissionDenied, "a management token is required")
	_, err = c.TokenUpdate(o, &pb.ACLTokenUpdateRequest{AccessorId: op.GetToken().GetAccessorId(), Name: "op", Policies: []string{"op"}})
	wantACLCode(t, err, codes.PermissionDenied, "a management token is required")
	_, err = c.PolicyUpsert(o, &pb.ACLPolicyUpsertRequest{Policy: &pb.ACLPolicy{Name: "op", Rules: `job { policy = "write" }`}})
	wantACLCode(t, err, codes.PermissionDenied, "a management token is required")
	_, err = c.TokenDelete(o, &pb.ACLTokenDeleteRequest{AccessorId: boot.GetToken().GetAccessorId()})
	wantACLCode(t, err, codes.PermissionDenied, "a management token is required")
	// Operator write still does what it is for.
	if _, err := pb.NewOperatorClient(tc.conn(s)).RaftConfiguration(o, &pb.RaftConfigurationRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TokenCreate(m, &pb.ACLTokenCreateRequest{Name: "second", Type: "management"}); err != nil {
		t.Fatal(err)
	}
}

// TestACLStateSurvivesSnapshotRestore saves a snapshot with a management
// token (the operator API needs one), deletes a token and its policy, and
// restores: both are back, and the restored token works.
func TestACLStateSurvivesSnapshotRestore(t *testing.T) {
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
	ro, err := c.TokenCreate(m, &pb.ACLTokenCreateRequest{Name: "ro", Policies: []string{"ro"}})
	if err != nil {
		t.Fatal(err)
	}

	// Saving needs a management token: refused without one, before any
	// chunk is sent.
	stream, err := pb.NewOperatorClient(tc.conn(s)).SnapshotSave(ctx10s(t), &pb.SnapshotSaveRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	wantACLCode(t, err, codes.PermissionDenied, "a management token is required")
	stream, err = pb.NewOperatorClient(tc.conn(s)).SnapshotSave(m, &pb.SnapshotSaveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var snap []byte
	for {
		chunk, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		snap = append(snap, chunk.GetData()...)
	}

	if _, err := c.TokenDelete(m, &pb.ACLTokenDeleteRequest{AccessorId: ro.GetToken().GetAccessorId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PolicyDelete(m, &pb.ACLPolicyDeleteRequest{Name: "ro"}); err != nil {
		t.Fatal(err)
	}
	_, err = pb.NewJobsClient(tc.conn(s)).List(withToken(ctx10s(t), ro.GetSecretId()), &pb.JobListRequest{})
	wantACLCode(t, err, codes.Unauthenticated, "not found")

	up, err := pb.NewOperatorClient(tc.conn(s)).SnapshotRestore(m)
	if err != nil {
		t.Fatal(err)
	}
	for len(snap) > 0 {
		n := min(len(snap), 1<<16)
		if err := up.Send(&pb.SnapshotChunk{Data: snap[:n]}); err != nil {
			t.Fatal(err)
		}
		snap = snap[n:]
	}
	if _, err := up.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.State().ACLPolicy(nil, "ro"); p == nil {
		t.Fatal("the restored state lacks the policy")
	}
	if _, err := pb.NewJobsClient(tc.conn(s)).List(withToken(ctx10s(t), ro.GetSecretId()), &pb.JobListRequest{}); err != nil {
		t.Fatalf("the restored token: %v", err)
	}
	_, err = pb.NewJobsClient(tc.conn(s)).Register(withToken(ctx10s(t), ro.GetSecretId()), &pb.JobRegisterRequest{Job: serviceJob("web", 1)})
	wantACLCode(t, err, codes.PermissionDenied, `"submit-job"`)
}

// TestACLRevertToAMountingVersionNeedsCSIMountVolume: reverting a job to a
// version that mounts a volume needs what registering that version would.
func TestACLRevertToAMountingVersionNeedsCSIMountVolume(t *testing.T) {
	tc := newTestCluster(t, 1, withACL)
	s := tc.waitLeader()
	waitVersions(tc, s)
	c := pb.NewACLClient(tc.conn(s))
	boot, err := c.Bootstrap(ctx10s(t), &pb.ACLBootstrapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m := withToken(ctx10s(t), boot.GetSecretId())
	jobs := pb.NewJobsClient(tc.conn(s))
	if _, err := jobs.Register(m, &pb.JobRegisterRequest{Job: volumeJob("db", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Register(m, &pb.JobRegisterRequest{Job: serviceJob("db", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PolicyUpsert(m, &pb.ACLPolicyUpsertRequest{Policy: &pb.ACLPolicy{Name: "dep", Rules: `job { policy = "write" }`}}); err != nil {
		t.Fatal(err)
	}
	dep, err := c.TokenCreate(m, &pb.ACLTokenCreateRequest{Name: "dep", Policies: []string{"dep"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = jobs.Revert(withToken(ctx10s(t), dep.GetSecretId()), &pb.JobRevertRequest{JobId: "db", Version: 0})
	wantACLCode(t, err, codes.PermissionDenied, `capability "csi-mount-volume" on volume is required`)
	if _, err := jobs.Revert(m, &pb.JobRevertRequest{JobId: "db", Version: 0}); err != nil {
		t.Fatal(err)
	}
}

// TestACLRefusalIsLoggedByAccessor: a refused call is logged with the
// token's accessor ID; no log line ever holds a secret.
func TestACLRefusalIsLoggedByAccessor(t *testing.T) {
	var logs lockedBuffer
	tc := newTestCluster(t, 1, withACL, func(c *testConfig) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})
	})
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
	ro, err := c.TokenCreate(m, &pb.ACLTokenCreateRequest{Name: "ro", Policies: []string{"ro"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = pb.NewJobsClient(tc.conn(s)).Register(withToken(ctx10s(t), ro.GetSecretId()), &pb.JobRegisterRequest{Job: serviceJob("web", 1)})
	wantACLCode(t, err, codes.PermissionDenied, `"submit-job"`)
	out := logs.String()
	if !strings.Contains(out, "RPC refused by ACL") || !strings.Contains(out, "accessor_id="+ro.GetToken().GetAccessorId()) {
		t.Errorf("the refusal is not logged with the accessor ID:\n%s", out)
	}
	for _, secret := range []string{boot.GetSecretId(), ro.GetSecretId()} {
		if strings.Contains(out, secret) {
			t.Errorf("a secret is in the log:\n%s", out)
		}
	}
}

// TestACLTokenNewToAFollowerGoesToTheLeader: a follower that has not yet
// applied a token (here: cut off from raft) sends the call to the leader,
// which knows it, rather than answering 401.
func TestACLTokenNewToAFollowerGoesToTheLeader(t *testing.T) {
	tc := newTestCluster(t, 3, withACL)
	leader := tc.waitLeader()
	waitVersions(tc, leader)
	c := pb.NewACLClient(tc.conn(leader))
	boot, err := c.Bootstrap(ctx10s(t), &pb.ACLBootstrapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	waitToken(tc, boot.GetSecretId())
	m := withToken(ctx10s(t), boot.GetSecretId())
	if _, err := c.PolicyUpsert(m, &pb.ACLPolicyUpsertRequest{Policy: &pb.ACLPolicy{Name: "ro", Rules: `job { policy = "read" }`}}); err != nil {
		t.Fatal(err)
	}
	follower := tc.followers(leader)[0]
	tc.partition(follower)
	healed := false
	defer func() {
		if !healed {
			tc.heal(follower)
		}
	}()
	ro, err := c.TokenCreate(m, &pb.ACLTokenCreateRequest{Name: "ro", Policies: []string{"ro"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follower.aclResolver().Resolve(ro.GetSecretId()); err == nil {
		t.Fatal("the cut-off follower knows the new token")
	}
	done := make(chan error, 1)
	go func() {
		_, err := pb.NewJobsClient(tc.conn(follower)).List(withToken(context.Background(), ro.GetSecretId()), &pb.JobListRequest{})
		done <- err
	}()
	// The follower forwards at once while it knows the leader; once it
	// lost it, the call waits for one, which healing gives it back.
	var callErr error
	testutil.WaitFor(t, 15*time.Second, func() error {
		select {
		case callErr = <-done:
			return nil
		default:
		}
		if _, id := follower.raft.LeaderWithID(); id == "" && !healed {
			tc.heal(follower)
			healed = true
		}
		return fmt.Errorf("call not answered yet")
	})
	if callErr != nil {
		t.Fatalf("a token new to the follower: %v", callErr)
	}
}
