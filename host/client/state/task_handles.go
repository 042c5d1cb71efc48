package state

import (
	"fmt"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// PutTaskHandle stores (or replaces) a task handle, keyed by the task ID
// (TaskHandle.config.id), which is unique on the node.
func (db *DB) PutTaskHandle(rec *pb.TaskHandleRecord) error {
	id := rec.GetHandle().GetConfig().GetId()
	if rec.GetDriver() == "" || !sdk.ValidTaskID(id) {
		return fmt.Errorf("%w: task handle record needs a driver and a valid task id, got driver %q, id %q",
			ErrInvalidRecord, rec.GetDriver(), id)
	}
	return db.put(bucketTaskHandles, id, rec)
}

// TaskHandle returns the handle of task taskID, if any.
func (db *DB) TaskHandle(taskID string) (*pb.TaskHandleRecord, bool, error) {
	return get(db, bucketTaskHandles, taskID, func() *pb.TaskHandleRecord { return &pb.TaskHandleRecord{} })
}

// TaskHandles returns every task handle, sorted by task ID. Records that do
// not decode are reported as *RecordError values next to the others.
func (db *DB) TaskHandles() ([]*pb.TaskHandleRecord, error) {
	return list(db, bucketTaskHandles, func() *pb.TaskHandleRecord { return &pb.TaskHandleRecord{} })
}

// DeleteTaskHandle removes the handle of task taskID.
func (db *DB) DeleteTaskHandle(taskID string) error {
	return db.del(bucketTaskHandles, taskID)
}
