package fsm

import (
	"slices"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// Reads of jobs, evals and allocs, for the servers' endpoints, the
// scheduler (through a StateSnapshot), the broker and the GC. Like every
// read they add a watch on what they read to ws (which may be nil), answer
// nil rather than an error for an object that is not stored (so a blocking
// query can wait for it to appear), and return rows that must not be
// mutated.

// JobByID returns the current version of the job, or nil.
func (r reader) JobByID(ws memdb.WatchSet, id string) (*pb.Job, error) {
	return jobsTable.first(r, ws, id)
}

// JobVersion returns the given version of the job from job_versions, or
// nil when it is not kept (JobVersionsKept) or the job is not stored.
func (r reader) JobVersion(ws memdb.WatchSet, id string, version uint64) (*pb.Job, error) {
	return jobVersionsTable.first(r, ws, id, versionKey(version))
}

// JobVersions returns the kept versions of the job, newest first.
func (r reader) JobVersions(ws memdb.WatchSet, id string) ([]*pb.Job, error) {
	versions, err := jobVersionsTable.list(r, ws, id)
	slices.Reverse(versions)
	return versions, err
}

// JobsPage returns one page of jobs sorted by ID, as NodesPage does for
// nodes: from the first job whose ID is at or after from, those keep
// accepts (all when nil), at most limit (all when limit <= 0), and the ID
// to pass as from for the next page ("" after the last).
func (r reader) JobsPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.Job) bool) (jobs []*pb.Job, next string, err error) {
	return pageByID(r, jobsTable, ws, from, limit, keep)
}

// pageByID reads a page of a table keyed by one ID (see NodesPage).
func pageByID[M proto.Message](r reader, t *table[M], ws memdb.WatchSet, from string, limit int, keep func(M) bool) ([]M, string, error) {
	var lower []string
	if from != "" {
		lower = []string{from}
	}
	rows, nextKey, err := t.page(r, ws, lower, limit, keep)
	if err != nil || nextKey == nil {
		return rows, "", err
	}
	return rows, nextKey[0], nil
}
