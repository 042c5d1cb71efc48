package fsm_test

import (
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// A terminal evaluation's row is final once every server is at the gate:
// a worker's late copy (a woken blocked evaluation cancelled meanwhile)
// neither turns "canceled" back into "blocked" nor into "complete". With
// an older server in the servers table the upsert is stored, as that
// server would store it.
func TestTerminalEvalStaysTerminal(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    pb.EvalStatus
	}{
		{fsm.ClaimStateSinceVersion, pb.EvalStatus_EVAL_STATUS_CANCELED},
		{"0.1.0-dev.3", pb.EvalStatus_EVAL_STATUS_BLOCKED},
	} {
		t.Run(tc.version, func(t *testing.T) {
			f := fsm.New(nil)
			applyOK(t, f, 1, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: tc.version}})
			ev := func(status pb.EvalStatus, desc string) *pb.EvalUpsertCommand {
				return &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{{Id: "b1", JobId: "web", Priority: 50,
					Type: pb.JobType_JOB_TYPE_SERVICE, Status: status, StatusDescription: desc}}}
			}
			applyOK(t, f, 2, fsm.EvalUpsert, ev(pb.EvalStatus_EVAL_STATUS_BLOCKED, "waiting"))
			applyOK(t, f, 3, fsm.EvalUpsert, ev(pb.EvalStatus_EVAL_STATUS_CANCELED, "superseded"))
			applyOK(t, f, 4, fsm.EvalUpsert, ev(pb.EvalStatus_EVAL_STATUS_BLOCKED, "late copy"))
			applyOK(t, f, 5, fsm.EvalUpsert, ev(tc.want, "late copy"))
			e, err := f.State().Snapshot().EvalByID(nil, "b1")
			if err != nil {
				t.Fatal(err)
			}
			if e.GetStatus() != tc.want {
				t.Fatalf("status %v, want %v", e.GetStatus(), tc.want)
			}
			if tc.want == pb.EvalStatus_EVAL_STATUS_CANCELED {
				if e.GetModifyIndex() != 5 || e.GetStatusDescription() != "late copy" {
					t.Fatalf("an upsert keeping the terminal status is stored: modify %d %q", e.GetModifyIndex(), e.GetStatusDescription())
				}
				complete := ev(pb.EvalStatus_EVAL_STATUS_COMPLETE, "late")
				applyOK(t, f, 6, fsm.EvalUpsert, complete)
				if e, _ := f.State().Snapshot().EvalByID(nil, "b1"); e.GetStatus() != pb.EvalStatus_EVAL_STATUS_CANCELED || e.GetModifyIndex() != 5 {
					t.Fatalf("canceled moved to %v at %d", e.GetStatus(), e.GetModifyIndex())
				}
			}
		})
	}
}
