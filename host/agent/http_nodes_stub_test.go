package agent

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// fullNode sets every field of a node, its fingerprint and a driver, so a
// stub test sees a field added to any of them (TestNodeStubKeepsAllButTheListedParts
// fails until the field is set here and the stub keeps or leaves it out).
func fullNode() *pb.Node {
	return &pb.Node{
		Id: "n1", Name: "vm", Status: pb.NodeStatus_NODE_STATUS_READY, StatusDescription: "registered",
		StatusUpdatedAt: 11,
		Fingerprint: &pb.NodeFingerprint{Hostname: "vm", Os: "linux", Arch: "amd64", CpuCores: 2, MemoryBytes: 1 << 30,
			BerthVersion: "0.1.0", Attributes: map[string]string{"cpu.arch": "amd64"}, CpuTotalMhz: 5000},
		Drivers: map[string]*pb.DriverInfo{"exec": {Name: "exec", Detected: true, Healthy: true, HealthDescription: "healthy",
			Version: "0.1.0", Builtin: true, Path: "/bin/x", Attributes: map[string]string{"driver.exec": "true"}, UpdatedAt: 12,
			TaskSchema: &driverpb.Schema{Fields: []*driverpb.Field{{Name: "command"}}}, MountVolumes: true}},
		HttpAddr: "127.0.0.1:4646", RegisteredAt: 13, Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE,
		Drain:                &pb.DrainStrategy{DeadlineMs: 1000},
		Resources:            &pb.NodeResources{CpuMhz: 100},
		Meta:                 map[string]string{"rack": "r1"},
		CsiControllerPlugins: map[string]*pb.CSIPluginInfo{"p": {PluginId: "p"}},
		CsiNodePlugins:       map[string]*pb.CSIPluginInfo{"p": {PluginId: "p"}},
		Fenced:               true, FencedAt: 14, CreateIndex: 15, ModifyIndex: 16,
		HostVolumes: map[string]*pb.HostVolumeInfo{"data": {Path: "/srv"}},
		SecretHash:  []byte{1}, Readmitted: true, HasSecret: true,
	}
}

// checkStubFields holds every field of stub to orig's value, except those
// left out, which must be unset, and the node's fingerprint and drivers,
// which have stubs of their own; every field of orig must be set.
func checkStubFields(t *testing.T, orig, stub protoreflect.Message, leftOut ...protoreflect.Name) {
	t.Helper()
	fields := orig.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if !orig.Has(f) {
			t.Errorf("%s: the fixture leaves %s unset; set it so the stub's handling of it is checked", orig.Descriptor().Name(), f.Name())
			continue
		}
		switch {
		case orig.Descriptor().FullName() == "berth.v1.Node" && (f.Name() == "fingerprint" || f.Name() == "drivers"):
			// Checked by the caller.
		case slices.Contains(leftOut, f.Name()):
			if stub.Has(f) {
				t.Errorf("%s.%s is kept in the stub; it should be left out", orig.Descriptor().Name(), f.Name())
			}
		default:
			if !stub.Get(f).Equal(orig.Get(f)) {
				t.Errorf("%s.%s = %v in the stub, want %v", orig.Descriptor().Name(), f.Name(), stub.Get(f), orig.Get(f))
			}
		}
	}
}

func TestNodeStubKeepsAllButTheListedParts(t *testing.T) {
	n := fullNode()
	orig := proto.Clone(n).(*pb.Node)
	s := nodeStub(n)
	if !proto.Equal(n, orig) {
		t.Fatal("nodeStub changed the node")
	}
	checkStubFields(t, n.ProtoReflect(), s.ProtoReflect(), "resources", "meta", "csi_controller_plugins", "csi_node_plugins", "secret_hash")
	checkStubFields(t, n.GetFingerprint().ProtoReflect(), s.GetFingerprint().ProtoReflect(), "attributes")
	if len(s.GetDrivers()) != 1 {
		t.Fatalf("stub drivers = %v", s.GetDrivers())
	}
	checkStubFields(t, n.GetDrivers()["exec"].ProtoReflect(), s.GetDrivers()["exec"].ProtoReflect(), "attributes", "task_schema")

	// A node without a fingerprint or drivers stays without them.
	bare := nodeStub(&pb.Node{Id: "n2"})
	if bare.GetFingerprint() != nil || bare.GetDrivers() != nil {
		t.Fatalf("bare stub = %v", bare)
	}
}

// TestNodeListStubs: ?stub=true answers the same nodes, smaller, without
// the drivers' task schemas; the full list is unchanged.
func TestNodeListStubs(t *testing.T) {
	a := testAgent(t)
	newNode := func() *pb.Node { return &pb.Node{} }
	// The client registers again once its drivers have fingerprinted: the
	// lists are compared when both were read at one index.
	testutil.WaitFor(t, 20*time.Second, func() error {
		full := do(t, a, "GET", "/v1/nodes", nil)
		stubs := do(t, a, "GET", "/v1/nodes?stub=true", nil)
		if full.status != 200 || stubs.status != 200 {
			t.Fatalf("status %d / %d: %s %s", full.status, stubs.status, full.body, stubs.body)
		}
		if fi, si := full.header.Get(HeaderIndex), stubs.header.Get(HeaderIndex); fi == "" || fi != si {
			return fmt.Errorf("read at index %q, then %q", fi, si)
		}
		fullNodes, err := apijson.UnmarshalList(full.body, newNode)
		if err != nil {
			t.Fatal(err)
		}
		stubNodes, err := apijson.UnmarshalList(stubs.body, newNode)
		if err != nil {
			t.Fatal(err)
		}
		if len(fullNodes) != 1 || len(stubNodes) != 1 {
			t.Fatalf("%d nodes, %d stubs", len(fullNodes), len(stubNodes))
		}
		f, s := fullNodes[0], stubNodes[0]
		if f.GetDrivers()["exec"].GetTaskSchema() == nil {
			return fmt.Errorf("drivers not fingerprinted yet: %v", f.GetDrivers())
		}
		if !proto.Equal(s, nodeStub(f)) {
			t.Fatalf("stub %v, want %v", s, nodeStub(f))
		}
		if 2*len(stubs.body) > len(full.body) {
			t.Fatalf("stubs are %d bytes against the full list's %d", len(stubs.body), len(full.body))
		}
		return nil
	})
	do(t, a, "GET", "/v1/nodes?stub=maybe", nil).wantError(t, 400, "invalid_argument", `stub="maybe"`)
}
