package state

import (
	"errors"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

func TestVolumeUsageAndReportsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db := open(t, path)
	usage := &pb.VolumeUsageRecord{VolumeId: "v1", PluginId: "hostpath", ExternalId: "ext-1",
		StageState: pb.VolumeStageState_VOLUME_STAGE_STATE_STAGED, StagingPath: "/d/csi/staging/hostpath/v1",
		Uses: []*pb.VolumeUse{{User: "a1", State: pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED, TargetPath: "/d/csi/publish/a1/v1"}}}
	for _, rec := range []*pb.VolumeUsageRecord{usage, {VolumeId: "v2", PluginId: "hostpath"}} {
		if err := db.PutVolumeUsage(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutVolumeUsage(&pb.VolumeUsageRecord{VolumeId: "v3"}); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("usage without a plugin = %v, want ErrInvalidRecord", err)
	}
	if err := db.DeleteVolumeUsage("v2"); err != nil {
		t.Fatal(err)
	}
	inUse := &pb.VolumeReportRecord{Request: &pb.ClientClaimUpdateRequest{AllocId: "a1", VolumeId: "v1", State: pb.ClaimState_CLAIM_STATE_IN_USE}}
	detached := &pb.VolumeReportRecord{Request: &pb.ClientClaimUpdateRequest{AllocId: "a1", VolumeId: "v1", State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED}}
	op := &pb.VolumeReportRecord{Request: &pb.ClientClaimUpdateRequest{ClaimId: "c9", VolumeId: "v1", State: pb.ClaimState_CLAIM_STATE_IN_USE}}
	for _, rec := range []*pb.VolumeReportRecord{inUse, detached, op} {
		if err := db.PutVolumeReport(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutVolumeReport(&pb.VolumeReportRecord{Request: &pb.ClientClaimUpdateRequest{AllocId: "a/b", VolumeId: "v1"}}); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("report keyed with a '/' = %v, want ErrInvalidRecord", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open(t, path)
	got, err := db.VolumeUsages()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !proto.Equal(got[0], usage) {
		t.Fatalf("usages after reopen: %v, want only %v", got, usage)
	}
	reports, err := db.VolumeReports()
	if err != nil {
		t.Fatal(err)
	}
	// The alloc's node-detached replaced its in-use: one report per claim.
	if len(reports) != 2 || !proto.Equal(reports[0], detached) || !proto.Equal(reports[1], op) {
		t.Fatalf("reports after reopen: %v, want %v and %v", reports, detached, op)
	}
	if err := db.DeleteVolumeReport(detached.GetRequest()); err != nil {
		t.Fatal(err)
	}
	if reports, _ := db.VolumeReports(); len(reports) != 1 || !proto.Equal(reports[0], op) {
		t.Fatalf("reports after delete: %v, want only %v", reports, op)
	}
}
