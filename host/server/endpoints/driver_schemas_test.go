package endpoints

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// schemaRequiring is a task schema with one required string field.
func schemaRequiring(field string) *driverpb.Schema {
	return &driverpb.Schema{Fields: []*driverpb.Field{
		{Name: field, Type: driverpb.FieldType_FIELD_TYPE_STRING, Required: true},
	}}
}

func schemaNode(id string, detected bool, drivers map[string]*driverpb.Schema) *pb.Node {
	n := &pb.Node{Id: id, Name: id, Status: pb.NodeStatus_NODE_STATUS_READY, Drivers: map[string]*pb.DriverInfo{}}
	for name, s := range drivers {
		n.Drivers[name] = &pb.DriverInfo{Name: name, Detected: detected, Healthy: detected, TaskSchema: s}
	}
	return n
}

// driverJob is a job of one task of driver with config key=value.
func driverJob(driver, key string) *pb.Job {
	return &pb.Job{
		Id: "j", Name: "j", Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "g", Count: 1, Tasks: []*pb.Task{{
			Name: "t", Driver: driver,
			Config: map[string]*driverpb.ConfigValue{
				key: {Kind: &driverpb.ConfigValue_StringValue{StringValue: "x"}},
			},
		}}}},
	}
}

func registerNodes(t testing.TB, s *fsmServer, nodes ...*pb.Node) {
	t.Helper()
	for _, n := range nodes {
		if _, err := s.Apply(context.Background(), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n}); err != nil {
			t.Fatal(err)
		}
	}
}

// check runs checkDrivers on the state's latest snapshot through c.
func check(t *testing.T, s *fsmServer, c *driverSchemas, job *pb.Job) ([]string, error) {
	t.Helper()
	schemas, err := c.at(s.State().Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	return checkDrivers(schemas, job)
}

// TestCheckDriversSemantics: a driver no node detected is a warning; a
// config its schema refuses is an error naming group, task and key; where
// nodes disagree the node last in ID order decides; a node change is seen
// at once, and checks between changes do not read the nodes again.
func TestCheckDriversSemantics(t *testing.T) {
	s := &fsmServer{f: fsm.New(testutil.Logger(t))}
	var c driverSchemas
	registerNodes(t, s,
		schemaNode("node-a", true, map[string]*driverpb.Schema{"d": schemaRequiring("command")}),
		schemaNode("node-b", true, map[string]*driverpb.Schema{"d": schemaRequiring("path")}),
		// Not detected: its schema counts for nothing.
		schemaNode("node-c", false, map[string]*driverpb.Schema{"d": schemaRequiring("other"), "e": schemaRequiring("x")}),
	)

	warnings, err := check(t, s, &c, driverJob("nope", "command"))
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "nope") {
		t.Fatalf("unknown driver: warnings %q, err %v; want one warning naming it", warnings, err)
	}
	warnings, err = check(t, s, &c, driverJob("e", "x"))
	if err != nil || len(warnings) != 1 {
		t.Fatalf("driver only an undetected node has: warnings %q, err %v; want a warning", warnings, err)
	}
	// node-b, last in ID order, decides: it requires path.
	if _, err := check(t, s, &c, driverJob("d", "path")); err != nil {
		t.Fatalf("config node-b's schema accepts: %v", err)
	}
	_, err = check(t, s, &c, driverJob("d", "command"))
	if err == nil {
		t.Fatal("config node-b's schema refuses was accepted")
	}
	for _, want := range []string{"g", "t", "path"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	if c.rebuilt != 1 {
		t.Fatalf("schemas built %d times over one nodes index, want 1", c.rebuilt)
	}

	// A node after node-b now decides; the next check sees it.
	registerNodes(t, s, schemaNode("node-z", true, map[string]*driverpb.Schema{"d": schemaRequiring("command")}))
	if _, err := check(t, s, &c, driverJob("d", "command")); err != nil {
		t.Fatalf("after node-z joined: %v", err)
	}
	if _, err := check(t, s, &c, driverJob("d", "path")); err == nil {
		t.Fatal("after node-z joined, node-b's schema still decides")
	}
	if c.rebuilt != 2 {
		t.Fatalf("schemas built %d times over two nodes indexes, want 2", c.rebuilt)
	}

	// An older snapshot is answered from its own nodes, and leaves the
	// newer map cached.
	old := s.State().Snapshot()
	registerNodes(t, s, schemaNode("node-zz", true, map[string]*driverpb.Schema{"d": schemaRequiring("path")}))
	newer, err := c.at(s.State().Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	older, err := c.at(old)
	if err != nil {
		t.Fatal(err)
	}
	if newer["d"].GetFields()[0].GetName() != "path" || older["d"].GetFields()[0].GetName() != "command" {
		t.Fatalf("newer %v, older %v", newer["d"], older["d"])
	}
	if again, _ := c.at(s.State().Snapshot()); again["d"].GetFields()[0].GetName() != "path" {
		t.Fatal("an older snapshot replaced the newer schemas")
	}
}

// BenchmarkCheckDrivers is a job register's driver check over a cluster of
// n nodes that did not change since the last check: flat in n (cached).
// scan is the check as it was before driverSchemas, reading every node
// each time, for comparison in the same run.
func BenchmarkCheckDrivers(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		s := &fsmServer{f: fsm.New(testutil.Logger(b))}
		for i := range n {
			registerNodes(b, s, schemaNode(fmt.Sprintf("node-%05d", i), true, map[string]*driverpb.Schema{
				"d": schemaRequiring("command"), "raw_exec": schemaRequiring("command"), "docker": schemaRequiring("image"),
			}))
		}
		job := driverJob("d", "command")
		b.Run(fmt.Sprintf("cached/nodes=%d", n), func(b *testing.B) {
			var c driverSchemas
			for b.Loop() {
				schemas, err := c.at(s.State().Snapshot())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := checkDrivers(schemas, job); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("scan/nodes=%d", n), func(b *testing.B) {
			for b.Loop() {
				nodes, err := s.State().Snapshot().Nodes(nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := checkDrivers(schemasOf(nodes), job); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
