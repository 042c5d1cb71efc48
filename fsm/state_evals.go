package fsm

import (
	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/rpc/pb"
)

// EvalByID returns the evaluation, or nil.
func (r reader) EvalByID(ws memdb.WatchSet, id string) (*pb.Evaluation, error) {
	return evalsTable.first(r, ws, id)
}

// EvalsByJob returns the job's evaluations sorted by ID, purged jobs'
// included.
func (r reader) EvalsByJob(ws memdb.WatchSet, jobID string) ([]*pb.Evaluation, error) {
	return evalsByJob.list(r, ws, jobID)
}

// EvalsByStatus returns the evaluations in one status, sorted by ID: the
// broker restores the pending and blocked ones when its server becomes
// leader.
func (r reader) EvalsByStatus(ws memdb.WatchSet, status pb.EvalStatus) ([]*pb.Evaluation, error) {
	return evalsByStatus.list(r, ws, statusKey(status))
}

// EvalsPage returns one page of evaluations sorted by ID (see JobsPage).
func (r reader) EvalsPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.Evaluation) bool) (evals []*pb.Evaluation, next string, err error) {
	return pageByID(r, evalsTable, ws, from, limit, keep)
}
