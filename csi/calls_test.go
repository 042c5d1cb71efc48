package csi_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc/errcode"
)

var update = flag.Bool("update", false, "rewrite csi/CALLS.md from the call table")

// Codes classes retry on, as the pinned table writes them.
var (
	uncertain = []codes.Code{codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Unavailable}
	create    = []codes.Code{codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.Unavailable}
)

// pinned is the call table as berth had it before the table existed
// (deadlines from DefaultTimeouts, retry codes from csi.IsUncertain, and
// volume create's own rule that ResourceExhausted from CreateVolume is
// final; NotFound from the undo calls): a change to any row is a change of
// what berth does, made here on purpose.
var pinned = map[csi.Call]struct {
	deadline time.Duration
	retryOn  []codes.Code
	notFound bool
}{
	csi.CallGetPluginInfo:         {10 * time.Second, uncertain, false},
	csi.CallGetPluginCapabilities: {10 * time.Second, uncertain, false},
	csi.CallProbe:                 {5 * time.Second, uncertain, false},

	csi.CallCreateVolume:               {5 * time.Minute, create, false},
	csi.CallDeleteVolume:               {5 * time.Minute, uncertain, true},
	csi.CallControllerPublishVolume:    {2 * time.Minute, uncertain, false},
	csi.CallControllerUnpublishVolume:  {2 * time.Minute, uncertain, true},
	csi.CallValidateVolumeCapabilities: {30 * time.Second, uncertain, false},
	csi.CallListVolumes:                {30 * time.Second, uncertain, false},
	csi.CallGetCapacity:                {30 * time.Second, uncertain, false},
	csi.CallControllerGetCapabilities:  {10 * time.Second, uncertain, false},
	csi.CallCreateSnapshot:             {5 * time.Minute, create, false},
	csi.CallDeleteSnapshot:             {5 * time.Minute, uncertain, true},
	csi.CallListSnapshots:              {30 * time.Second, uncertain, false},
	csi.CallControllerExpandVolume:     {5 * time.Minute, uncertain, false},
	csi.CallControllerGetVolume:        {30 * time.Second, uncertain, false},

	csi.CallNodeStageVolume:     {2 * time.Minute, uncertain, false},
	csi.CallNodeUnstageVolume:   {2 * time.Minute, uncertain, true},
	csi.CallNodePublishVolume:   {2 * time.Minute, uncertain, false},
	csi.CallNodeUnpublishVolume: {2 * time.Minute, uncertain, true},
	csi.CallNodeGetVolumeStats:  {30 * time.Second, uncertain, false},
	csi.CallNodeExpandVolume:    {5 * time.Minute, uncertain, false},
	csi.CallNodeGetCapabilities: {10 * time.Second, uncertain, false},
	csi.CallNodeGetInfo:         {10 * time.Second, uncertain, false},
}

// allGRPCCodes is every code gRPC defines.
func allGRPCCodes() []codes.Code {
	var out []codes.Code
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		out = append(out, c)
	}
	return out
}

// TestCallTablePinned checks every row against pinned, through the table
// and through what the client derives from it.
func TestCallTablePinned(t *testing.T) {
	rows := csi.Calls()
	if len(rows) != len(pinned) {
		t.Errorf("the table has %d rows, %d are pinned", len(rows), len(pinned))
	}
	defaults := csi.DefaultTimeouts()
	for _, r := range rows {
		want, ok := pinned[r.Call]
		if !ok {
			t.Errorf("%s: in the table but not pinned", r.Call)
			continue
		}
		if r.Deadline != want.deadline || r.Call.Deadline() != want.deadline || defaults[r.Call] != want.deadline {
			t.Errorf("%s: deadline %v (Call.Deadline %v, DefaultTimeouts %v), want %v", r.Call, r.Deadline, r.Call.Deadline(), defaults[r.Call], want.deadline)
		}
		var got []codes.Code
		for _, c := range allGRPCCodes() {
			if r.RetryOn.Has(c) {
				got = append(got, c)
			}
			err := &csi.Error{Call: r.Call, Code: c}
			if r.Call.Retryable(err) != slices.Contains(want.retryOn, c) {
				t.Errorf("%s: Retryable(%s) = %v", r.Call, c, r.Call.Retryable(err))
			}
		}
		if !slices.Equal(got, want.retryOn) {
			t.Errorf("%s: retried on %v, want %v", r.Call, got, want.retryOn)
		}
		if r.NotFoundIsSuccess != want.notFound || r.Call.NotFoundIsSuccess() != want.notFound {
			t.Errorf("%s: NotFoundIsSuccess %v, want %v", r.Call, r.NotFoundIsSuccess, want.notFound)
		}
		if r.RetriedBy == "" || r.Safe == "" {
			t.Errorf("%s: RetriedBy and Safe must say who retries it and why that is safe", r.Call)
		}
		if s, ok := r.Call.Spec(); !ok || s.Call != r.Call {
			t.Errorf("%s: Spec() = %v, %v", r.Call, s.Call, ok)
		}
	}
	// A call not in the table still gets a deadline and today's retry rule.
	unknown := csi.Call("NoSuchCall")
	if _, ok := unknown.Spec(); ok || unknown.Deadline() != 2*time.Minute || unknown.NotFoundIsSuccess() ||
		!unknown.Retryable(status.Error(codes.ResourceExhausted, "x")) {
		t.Errorf("a call missing from the table: deadline %v, NotFoundIsSuccess %v", unknown.Deadline(), unknown.NotFoundIsSuccess())
	}
}

// notCalled are the RPCs of the client's services the client does not
// make, each with why. A new RPC in the spec fails
// TestCallTableCoversTheServices until it is in the table or here.
var notCalled = map[string]string{
	"/csi.v1.Controller/ControllerListVolumeHealth": "volume health is not reported yet",
	"/csi.v1.Controller/ControllerGetVolumeHealth":  "volume health is not reported yet",
	"/csi.v1.Controller/GetSnapshot":                "snapshots are listed, not read one by one",
	"/csi.v1.Controller/ControllerModifyVolume":     "berth does not modify volumes' mutable parameters",
	"/csi.v1.Node/NodeGetVolumeHealth":              "volume health is not reported yet",
	"/csi.v1.Node/NodeGetStorageHealth":             "storage health is not reported yet",
}

// TestCallTableCoversTheServices derives the RPCs from the generated CSI
// service descriptors: every RPC of Identity, Controller and Node has a
// row or a reason in notCalled, every row is such an RPC, the rows follow
// csi.proto's order, every method of the typed clients named after an RPC
// has a row (a call the client starts making cannot be forgotten), and every
// row has its method on the typed client.
func TestCallTableCoversTheServices(t *testing.T) {
	rows := map[string]csi.CallSpec{}
	for _, r := range csi.Calls() {
		if _, dup := rows[r.FullMethod()]; dup {
			t.Errorf("%s: two rows", r.FullMethod())
		}
		rows[r.FullMethod()] = r
	}
	clients := map[csi.Service]reflect.Type{
		csi.ServiceIdentity:   reflect.TypeFor[*csi.IdentityClient](),
		csi.ServiceController: reflect.TypeFor[*csi.ControllerClient](),
		csi.ServiceNode:       reflect.TypeFor[*csi.NodeClient](),
	}
	var order []string // the descriptors' order of the rows' methods
	described := map[string]bool{}
	for svc, client := range clients {
		sd := csipb.File_csi_proto.Services().ByName(protoreflect.Name(svc))
		if sd == nil {
			t.Fatalf("csi.proto has no service %s", svc)
		}
		methods := sd.Methods()
		for i := range methods.Len() {
			name := string(methods.Get(i).Name())
			full := "/" + string(sd.FullName()) + "/" + name
			described[full] = true
			_, inTable := rows[full]
			_, onClient := client.MethodByName(name)
			switch {
			case inTable && notCalled[full] != "":
				t.Errorf("%s: in the table and in notCalled", full)
			case onClient && !inTable:
				t.Errorf("%s: the %s client makes it (%s.%s) but the call table has no row for it", full, svc, client.Elem().Name(), name)
			case !inTable && notCalled[full] == "":
				t.Errorf("%s: an RPC of %s with no row in the call table (csi/calls.go) and no reason in notCalled", full, svc)
			case inTable && !onClient:
				t.Errorf("%s: a row, but %s has no method %s", full, client.Elem().Name(), name)
			}
		}
	}
	for full := range notCalled {
		if !described[full] {
			t.Errorf("notCalled names %s, which csi.proto does not have", full)
		}
	}
	for full, r := range rows {
		if !described[full] {
			t.Errorf("row %s: no such RPC in csi.proto", full)
		}
		if _, ok := clients[r.Service]; !ok {
			t.Errorf("row %s: service %q", full, r.Service)
		}
	}
	// The rows follow csi.proto's order (Identity, Controller, Node), so
	// CALLS.md reads like the spec.
	for _, svc := range []csi.Service{csi.ServiceIdentity, csi.ServiceController, csi.ServiceNode} {
		methods := csipb.File_csi_proto.Services().ByName(protoreflect.Name(svc)).Methods()
		for i := range methods.Len() {
			full := "/csi.v1." + string(svc) + "/" + string(methods.Get(i).Name())
			if _, ok := rows[full]; ok {
				order = append(order, full)
			}
		}
	}
	var got []string
	for _, r := range csi.Calls() {
		got = append(got, r.FullMethod())
	}
	if !slices.Equal(got, order) {
		t.Errorf("rows out of csi.proto's order:\n got %v\nwant %v", got, order)
	}
	// What servers may forward through a node is a subset, by the same rows.
	for _, m := range csi.ForwardedMethods() {
		fm, _ := csi.ForwardedMethodOf(m)
		if r, ok := fm.Call.Spec(); !ok || r.FullMethod() != m || r.Service != csi.ServiceController {
			t.Errorf("forwarded %s: its call %s has row %v (%v)", m, fm.Call, r.FullMethod(), ok)
		}
	}
}

// TestRetryFollowsCallTable: csi.Retry decides by the call's row, so the
// same code is retried for one call and final for another.
func TestRetryFollowsCallTable(t *testing.T) {
	for _, tc := range []struct {
		call csi.Call
		code codes.Code
		want int // attempts, out of 3
	}{
		{csi.CallNodeStageVolume, codes.ResourceExhausted, 3},
		{csi.CallControllerPublishVolume, codes.ResourceExhausted, 3},
		{csi.CallCreateVolume, codes.ResourceExhausted, 1}, // no room: final
		{csi.CallCreateSnapshot, codes.ResourceExhausted, 1},
		{csi.CallCreateVolume, codes.Unavailable, 3},
		{csi.CallNodeStageVolume, codes.Internal, 1},
	} {
		r := csi.Retry{MaxAttempts: 3, Clock: instantClock{}, Logger: testLogger(t)}
		n := 0
		err := r.Do(testCtx(t), tc.call, "v1", func(context.Context) error {
			n++
			return &csi.Error{Call: tc.call, VolumeID: "v1", Code: tc.code}
		})
		if n != tc.want || status.Code(err) != tc.code {
			t.Errorf("%s/%s: %d attempts (error %v), want %d", tc.call, tc.code, n, err, tc.want)
		}
	}
}

// TestNotFoundFollowsCallTable: every call the client makes answers
// NotFound with success exactly where its row says so.
func TestNotFoundFollowsCallTable(t *testing.T) {
	p, _, c := startFake(t)
	ctx := testCtx(t)
	for _, cc := range allCalls(p) {
		cc.fail(status.Error(codes.NotFound, "no such thing"))
		err := cc.do(ctx, c)
		if want := cc.call.NotFoundIsSuccess(); (err == nil) != want {
			t.Errorf("%s: NotFound gave %v; the table's NotFoundIsSuccess is %v", cc.call, err, want)
		}
	}
}

// classNames names the classes the table uses, for CALLS.md.
var classNames = map[errcode.Class]string{
	errcode.Uncertain:       "Uncertain",
	errcode.CreateUncertain: "CreateUncertain",
}

// callTableDoc renders CALLS.md from the table.
func callTableDoc(t *testing.T) string {
	var b strings.Builder
	b.WriteString(`# The CSI calls berth makes

<!-- Generated from the call table (csi.Calls, csi/calls.go) by
     go test ./csi -run TestCallTableDoc -update
     Do not edit: the test fails when this file and the table differ. -->

One row per CSI RPC berth's client (package csi) makes. The client reads the
table: each attempt runs under the call's **deadline** (a sooner deadline on
the caller's context wins; csi.WithTimeouts overrides it), csi.Retry repeats a
failed call only on the codes in its **retried on** class (Call.Retryable; every
other code is final), and **NotFound** marked success is answered as success
by the typed client: the call undoes something the plugin says is not there.
**Retried by** says whether berth makes the call again, and who. The spec's
words on why repeating each call is safe follow the table.

| Call | Service | Deadline | Retried on | NotFound | Retried by |
|---|---|---|---|---|---|
`)
	used := map[errcode.Class]bool{}
	for _, r := range csi.Calls() {
		name, ok := classNames[r.RetryOn]
		if !ok {
			t.Fatalf("%s: its RetryOn class has no name in classNames", r.Call)
		}
		used[r.RetryOn] = true
		nf := "final"
		if r.NotFoundIsSuccess {
			nf = "success"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Call, r.Service, deadline(r.Deadline), name, nf, r.RetriedBy)
	}
	b.WriteString("\nThe classes (rpc/errcode/classes.go):\n\n")
	for _, class := range []errcode.Class{errcode.Uncertain, errcode.CreateUncertain} {
		if !used[class] {
			continue
		}
		var cs []string
		for _, c := range allGRPCCodes() {
			if class.Has(c) {
				cs = append(cs, c.String())
			}
		}
		fmt.Fprintf(&b, "- **%s**: %s.\n", classNames[class], strings.Join(cs, ", "))
	}
	b.WriteString(`
CreateUncertain leaves out ResourceExhausted because from CreateVolume and
CreateSnapshot it is the plugin's final answer that it cannot make the volume
or snapshot (no room, or not where asked), not a limit to wait out.

## Why repeating a call is safe

Quoted from the CSI spec v1.13.0 (spec.md), each call's own section unless
marked; the spec's Timeouts section holds for all: "Idempotency requirements
ensure that a retried call with the same fields continues where it left off
when retried."

`)
	for _, r := range csi.Calls() {
		fmt.Fprintf(&b, "- **%s**: %s\n", r.Call, r.Safe)
	}
	return b.String()
}

// deadline writes a duration the short way: 5s, 30s, 2m.
func deadline(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// TestCallTableDoc checks csi/CALLS.md against the table; -update writes it.
func TestCallTableDoc(t *testing.T) {
	const path = "CALLS.md"
	want := callTableDoc(t)
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./csi -run TestCallTableDoc -update writes it)", err)
	}
	if string(got) != want {
		t.Fatalf("csi/%s is stale: the call table changed (go test ./csi -run TestCallTableDoc -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
