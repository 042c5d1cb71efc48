package authz

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/acl"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{ErrUndeclared: codes.PermissionDenied, ErrBadNeed: codes.InvalidArgument})
}

// TestTableDeclaresKnownCapabilities: every capability the table names is
// one its resource's rules can grant, so some policy can allow it.
func TestTableDeclaresKnownCapabilities(t *testing.T) {
	for key, n := range table {
		switch n.Kind {
		case None, Token, Node, Server, Management:
		case Capability:
			if !acl.Known(n.Resource, n.Capability) {
				t.Errorf("%s needs %s, which no rule of %s grants", key, n.Capability, n.Resource)
			}
		default:
			t.Errorf("%s: kind %d", key, n.Kind)
		}
	}
}

func TestCheck(t *testing.T) {
	p, err := acl.Parse("p.hcl", []byte(`job { policy = "read" }`))
	if err != nil {
		t.Fatal(err)
	}
	read := acl.New(p)
	for _, tc := range []struct {
		need     Need
		a        *acl.ACL
		hasToken bool
		allowed  bool
	}{
		{Need{Kind: None}, nil, false, true},
		{Need{Kind: Node}, nil, false, true},
		{Need{Kind: Server}, nil, false, true},
		{Need{Kind: Token}, acl.New(), false, false},
		{Need{Kind: Token}, acl.New(), true, true},
		{Needs(acl.Job, acl.ReadJob), read, true, true},
		{Needs(acl.Job, acl.SubmitJob), read, true, false},
		{Needs(acl.Operator, acl.CapWrite), acl.Management(), true, true},
		{Need{}, acl.Management(), true, false},
	} {
		err := Check(tc.need, tc.a, tc.hasToken)
		if (err == nil) != tc.allowed {
			t.Errorf("%s: got %v, want allowed=%v", tc.need, err, tc.allowed)
		}
		if err != nil && (!errors.Is(err, acl.ErrPermissionDenied) || errcode.Code(err) != codes.PermissionDenied) {
			t.Errorf("%s: %v is not a coded permission denial", tc.need, err)
		}
	}
}

func TestExtra(t *testing.T) {
	job := &pb.Job{Groups: []*pb.TaskGroup{{Name: "g", Tasks: []*pb.Task{{Name: "t"}}}}}
	if got := Extra(pb.Jobs_Register_FullMethodName, &pb.JobRegisterRequest{Job: job}, nil); len(got) != 0 {
		t.Errorf("a plain job needs %v", got)
	}
	job.Groups[0].Volumes = map[string]*pb.VolumeRequest{"d": {Type: "csi", Source: "v"}}
	job.Groups[0].Tasks[0].CsiPlugin = &pb.CSIPluginConfig{Id: "p"}
	got := Extra(pb.Jobs_Register_FullMethodName, &pb.JobRegisterRequest{Job: job}, nil)
	var names []string
	for _, n := range got {
		names = append(names, n.String())
	}
	if strings.Join(names, ",") != "volume:csi-mount-volume,plugin:csi-register-plugin" {
		t.Errorf("a job mounting a volume and hosting a plugin needs %v", names)
	}
	// A revert to a version that mounts a volume needs what registering it
	// would.
	versions := func(id string, v uint64) *pb.Job {
		if id == "db" && v == 3 {
			return job
		}
		return nil
	}
	if got := Extra(pb.Jobs_Revert_FullMethodName, &pb.JobRevertRequest{JobId: "db", Version: 3}, versions); len(got) != 2 {
		t.Errorf("revert to a mounting version needs %v", got)
	}
	if got := Extra(pb.Jobs_Revert_FullMethodName, &pb.JobRevertRequest{JobId: "db", Version: 2}, versions); len(got) != 0 {
		t.Errorf("revert to an unknown version needs %v", got)
	}
	if got := Extra(pb.Volumes_Deregister_FullMethodName, &pb.VolumeDeregisterRequest{Force: true}, nil); len(got) != 1 || got[0] != Needs(acl.Operator, acl.CapWrite) {
		t.Errorf("forced deregister needs %v", got)
	}
	if got := Extra(pb.Volumes_Deregister_FullMethodName, &pb.VolumeDeregisterRequest{}, nil); len(got) != 0 {
		t.Errorf("plain deregister needs %v", got)
	}
}

func TestNeedOf(t *testing.T) {
	for _, tc := range []struct {
		req  *pb.ACLAuthorizeRequest
		want Need
		ok   bool
	}{
		{&pb.ACLAuthorizeRequest{Kind: "token"}, Need{Kind: Token}, true},
		{&pb.ACLAuthorizeRequest{Kind: "management"}, Need{Kind: Management}, true},
		{&pb.ACLAuthorizeRequest{Kind: "capability", Resource: "job", Capability: "submit-job"}, Needs(acl.Job, acl.SubmitJob), true},
		{&pb.ACLAuthorizeRequest{Kind: "capability", Resource: "job", Capability: "csi-mount-volume"}, Need{}, false},
		{&pb.ACLAuthorizeRequest{Kind: "capability", Resource: "namespace", Capability: "read"}, Need{}, false},
		{&pb.ACLAuthorizeRequest{Kind: "none"}, Need{}, false},
	} {
		got, err := NeedOf(tc.req)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%v: got %v, %v", tc.req, got, err)
		}
		if err != nil && !errors.Is(err, ErrBadNeed) {
			t.Errorf("%v: %v is not ErrBadNeed", tc.req, err)
		}
	}
}

// TestACLManagementNeedsAManagementToken: the ACL methods (policy and token
// reads and writes) need a management token, as Nomad's; operator write,
// or every capability a policy can grant, is not enough.
func TestACLManagementNeedsAManagementToken(t *testing.T) {
	all := ""
	for _, r := range acl.Resources {
		all += string(r) + " { policy = \"write\" }\n"
	}
	p, err := acl.Parse("all.hcl", []byte(all))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range pb.ACL_ServiceDesc.Methods {
		switch m.MethodName {
		case "Bootstrap", "Authorize", "TokenSelf":
			continue
		}
		n, ok := Method("/" + pb.ACL_ServiceDesc.ServiceName + "/" + m.MethodName)
		if !ok || n.Kind != Management {
			t.Errorf("ACL.%s needs %v, want management", m.MethodName, n)
			continue
		}
		err := Check(n, acl.New(p), true)
		if !errors.Is(err, acl.ErrPermissionDenied) || !strings.Contains(err.Error(), "management token") {
			t.Errorf("ACL.%s with every policy write: %v, want a refusal naming the management token", m.MethodName, err)
		}
		if err := Check(n, acl.Management(), true); err != nil {
			t.Errorf("ACL.%s with a management token: %v", m.MethodName, err)
		}
	}
	for key, n := range table {
		if strings.Contains(key, " /v1/acl/") && !strings.Contains(key, "/bootstrap") && !strings.Contains(key, "/token/self") && n.Kind != Management {
			t.Errorf("%s needs %v, want management", key, n)
		}
	}
}

func TestExtraHostVolumeMounts(t *testing.T) {
	job := &pb.Job{Groups: []*pb.TaskGroup{{Name: "g", Tasks: []*pb.Task{{Name: "t"}}}}}
	needs := func() string {
		var names []string
		for _, n := range Extra(pb.Jobs_Register_FullMethodName, &pb.JobRegisterRequest{Job: job}, nil) {
			names = append(names, n.String())
		}
		return strings.Join(names, ",")
	}
	job.Groups[0].Volumes = map[string]*pb.VolumeRequest{"d": {Type: "host", Source: "data", ReadOnly: true}}
	if got := needs(); got != "volume:host-volume-read" {
		t.Errorf("a read_only host volume mount needs %q", got)
	}
	job.Groups[0].Volumes["e"] = &pb.VolumeRequest{Type: "host", Source: "logs"}
	if got := needs(); got != "volume:host-volume-write" {
		t.Errorf("a read-write host volume mount needs %q", got)
	}
	// Volume read grants host-volume-read, not write; write grants both.
	read, err := acl.Parse("p.hcl", []byte(`volume { policy = "read" }`))
	if err != nil {
		t.Fatal(err)
	}
	a := acl.New(read)
	if !a.Allows(acl.Volume, acl.HostVolumeRead) || a.Allows(acl.Volume, acl.HostVolumeWrite) || a.Allows(acl.Volume, acl.HostVolumeCreate) {
		t.Error("volume read should grant host-volume-read only")
	}
}

// TestSnapshotsNeedAManagementToken: a snapshot carries the ACL tables and
// volume secrets and a restore replaces them, so operator write (which
// could otherwise restore a forged management token) is not enough.
func TestSnapshotsNeedAManagementToken(t *testing.T) {
	p, err := acl.Parse("op.hcl", []byte(`operator { policy = "write" }`))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		pb.Operator_SnapshotSave_FullMethodName, pb.Operator_SnapshotRestore_FullMethodName,
		"GET /v1/operator/snapshot", "PUT /v1/operator/snapshot",
	} {
		n, ok := table[key]
		if !ok {
			t.Fatalf("%s is not in the table", key)
		}
		if err := Check(n, acl.New(p), true); !errors.Is(err, acl.ErrPermissionDenied) {
			t.Errorf("%s with operator write: %v, want a refusal", key, err)
		}
		if err := Check(n, acl.Management(), true); err != nil {
			t.Errorf("%s with a management token: %v", key, err)
		}
	}
}
