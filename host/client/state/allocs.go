package state

import (
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"berth.dev/berth/rpc/pb"
)

// PutAlloc stores (or replaces) the record of an alloc the client runs,
// keyed by alloc ID.
func (db *DB) PutAlloc(rec *pb.AllocRecord) error {
	id := rec.GetAlloc().GetId()
	if id == "" || strings.Contains(id, "/") {
		return fmt.Errorf("%w: alloc record needs an alloc id without '/', got %q", ErrInvalidRecord, id)
	}
	return db.put(bucketAllocs, id, rec)
}

// Alloc returns the record of alloc id, if any.
func (db *DB) Alloc(id string) (*pb.AllocRecord, bool, error) {
	return get(db, bucketAllocs, id, func() *pb.AllocRecord { return &pb.AllocRecord{} })
}

// Allocs returns every alloc record, sorted by alloc ID. Records that do
// not decode are reported as *RecordError values next to the others.
func (db *DB) Allocs() ([]*pb.AllocRecord, error) {
	return list(db, bucketAllocs, func() *pb.AllocRecord { return &pb.AllocRecord{} })
}

// DeleteAlloc removes the record of alloc id and the state records of its
// tasks, in one transaction, so no task state outlives its alloc.
func (db *DB) DeleteAlloc(id string) error {
	return db.bolt.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketAllocs).Delete([]byte(id)); err != nil {
			return err
		}
		ts := tx.Bucket(bucketTaskStates)
		prefix := []byte(id + "/")
		var keys [][]byte
		c := ts.Cursor()
		for k, _ := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, _ = c.Next() {
			keys = append(keys, append([]byte(nil), k...))
		}
		for _, k := range keys {
			if err := ts.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// taskStateKey is the key of a task's state record.
func taskStateKey(allocID, task string) string { return allocID + "/" + task }

// PutTaskState stores (or replaces) the state of one task of an alloc,
// keyed by alloc ID and task name.
func (db *DB) PutTaskState(rec *pb.TaskStateRecord) error {
	if rec.GetAllocId() == "" || strings.Contains(rec.GetAllocId(), "/") || rec.GetTask() == "" {
		return fmt.Errorf("%w: task state record needs an alloc id without '/' and a task name, got alloc %q, task %q",
			ErrInvalidRecord, rec.GetAllocId(), rec.GetTask())
	}
	return db.put(bucketTaskStates, taskStateKey(rec.GetAllocId(), rec.GetTask()), rec)
}

// TaskStates returns the state records of alloc allocID's tasks, sorted by
// task name. Records that do not decode are reported as *RecordError
// values next to the others.
func (db *DB) TaskStates(allocID string) ([]*pb.TaskStateRecord, error) {
	var out []*pb.TaskStateRecord
	var errs []error
	prefix := allocID + "/"
	err := db.bolt.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketTaskStates).Cursor()
		for k, v := c.Seek([]byte(prefix)); k != nil && strings.HasPrefix(string(k), prefix); k, v = c.Next() {
			rec, err := decode(bucketTaskStates, k, v, func() *pb.TaskStateRecord { return &pb.TaskStateRecord{} })
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, rec)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("state db: read %s: %w", bucketTaskStates, err)
	}
	return out, errors.Join(errs...)
}
