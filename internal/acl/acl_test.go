package acl

import (
	"errors"
	"testing"
)

func mustParse(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := Parse("p.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyExpansion(t *testing.T) {
	read := New(mustParse(t, `job { policy = "read" } volume { policy = "read" } plugin { policy = "read" } node { policy = "read" }`))
	write := New(mustParse(t, `job { policy = "write" } volume { policy = "write" } plugin { policy = "write" } operator { policy = "write" }`))
	for _, tc := range []struct {
		acl  *ACL
		r    Resource
		c    Capability
		want bool
	}{
		{read, Job, ListJobs, true},
		{read, Job, ReadJob, true},
		{read, Job, SubmitJob, false},
		{read, Job, ReadLogs, false},
		{read, Volume, CSIReadVolume, true},
		{read, Volume, CSIMountVolume, false},
		{read, Plugin, CapRead, true},
		{read, Plugin, CSIRegisterPlugin, false},
		{read, Node, CapRead, true},
		{read, Node, CapWrite, false},
		{read, Operator, CapRead, false},
		{write, Job, SubmitJob, true},
		{write, Job, AllocLifecycle, true},
		{write, Volume, CSIMountVolume, true},
		{write, Volume, CSIWriteVolume, true},
		{write, Plugin, CSIRegisterPlugin, true},
		{write, Operator, CapRead, true},
		{write, Agent, CapRead, false},
	} {
		if got := tc.acl.Allows(tc.r, tc.c); got != tc.want {
			t.Errorf("%s %s: got %v, want %v", tc.r, tc.c, got, tc.want)
		}
	}
}

func TestMergeAddsAndDenyWins(t *testing.T) {
	a := New(
		mustParse(t, `job { policy = "read" } volume { capabilities = ["csi-mount-volume"] }`),
		mustParse(t, `job { capabilities = ["submit-job"] } operator { policy = "write" }`),
		mustParse(t, `operator { capabilities = ["deny"] }`),
	)
	if !a.Allows(Job, ReadJob) || !a.Allows(Job, SubmitJob) {
		t.Error("capabilities of two policies on job do not add up")
	}
	if !a.Allows(Volume, CSIMountVolume) || a.Allows(Volume, CSIReadVolume) {
		t.Error("a capabilities-only rule grants more or less than it names")
	}
	if a.Allows(Operator, CapRead) || a.Allows(Operator, CapWrite) {
		t.Error("deny capability did not win over write")
	}
	b := New(mustParse(t, `job { policy = "deny" capabilities = ["read-job"] }`), mustParse(t, `job { policy = "write" }`))
	if b.Allows(Job, ReadJob) {
		t.Error("policy deny did not win")
	}
}

func TestManagementAndZero(t *testing.T) {
	if !Management().Allows(Operator, CapWrite) || !Management().IsManagement() {
		t.Error("management does not allow everything")
	}
	var zero *ACL
	if zero.Allows(Job, ListJobs) || New().Allows(Job, ListJobs) {
		t.Error("an empty ACL allows")
	}
}

func TestCheckNamesTheCapability(t *testing.T) {
	err := New(mustParse(t, `job { policy = "read" }`)).Check(Job, SubmitJob)
	if !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("got %v", err)
	}
	if got, want := err.Error(), `permission denied: capability "submit-job" on job is required`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := Management().Check(Job, SubmitJob); err != nil {
		t.Error(err)
	}
}
