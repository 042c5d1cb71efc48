package state

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

func open(t *testing.T, path string) *DB {
	t.Helper()
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func handle(driver, id string) *pb.TaskHandleRecord {
	return &pb.TaskHandleRecord{
		Driver: driver,
		Handle: &driverpb.TaskHandle{
			Version: 1, Driver: driver, State: driverpb.TaskState_TASK_STATE_RUNNING,
			Config:      &driverpb.TaskConfig{Id: id, Name: "web", AllocId: "a1", TaskDir: "/tmp/t"},
			DriverState: []byte(`{"pid":42}`), StartedAt: 7,
		},
		UpdatedAt: 9,
	}
}

func plugin(name string, pid int64) *pb.DriverPluginRecord {
	return &pb.DriverPluginRecord{
		Name: name, Path: "/usr/bin/berth", Args: []string{"builtin", "driver", name},
		Reattach:   &pb.PluginReattach{Pid: pid, Network: "unix", Address: "/tmp/plugin" + name},
		LaunchedAt: 3, BerthVersion: "0.1.0",
	}
}

func TestRecordsSurviveReopen(t *testing.T) {
	path := Path(t.TempDir())
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []*pb.TaskHandleRecord{handle("raw_exec", "t2"), handle("mock", "t1")} {
		if err := db.PutTaskHandle(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutDriverPlugin(plugin("raw_exec", 100)); err != nil {
		t.Fatal(err)
	}
	if err := db.PutDriverPlugin(plugin("raw_exec", 200)); err != nil { // replaces
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = open(t, path)
	hs, err := db.TaskHandles()
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].GetHandle().GetConfig().GetId() != "t1" || !proto.Equal(hs[1], handle("raw_exec", "t2")) {
		t.Fatalf("task handles after reopen: %v", hs)
	}
	ps, err := db.DriverPlugins()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || !proto.Equal(ps[0], plugin("raw_exec", 200)) {
		t.Fatalf("driver plugins after reopen: %v", ps)
	}
	got, ok, err := db.TaskHandle("t2")
	if err != nil || !ok || !proto.Equal(got, handle("raw_exec", "t2")) {
		t.Fatalf("TaskHandle(t2) = %v, %t, %v", got, ok, err)
	}
	if _, ok, err := db.TaskHandle("nope"); ok || err != nil {
		t.Fatalf("TaskHandle(nope) = %t, %v", ok, err)
	}

	if err := db.DeleteTaskHandle("t1"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteTaskHandle("t1"); err != nil {
		t.Fatalf("deleting a missing handle: %v", err)
	}
	if err := db.DeleteDriverPlugin("raw_exec"); err != nil {
		t.Fatal(err)
	}
	hs, _ = db.TaskHandles()
	ps, _ = db.DriverPlugins()
	if len(hs) != 1 || hs[0].GetHandle().GetConfig().GetId() != "t2" || len(ps) != 0 {
		t.Fatalf("after deletes: handles %v, plugins %v", hs, ps)
	}
	if _, ok, _ := db.DriverPlugin("raw_exec"); ok {
		t.Fatal("deleted driver plugin record still there")
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	path := Path(t.TempDir())
	open(t, path)
	_, err := Open(path)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		m, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		var v [4]byte
		binary.BigEndian.PutUint32(v[:], SchemaVersion+1)
		return m.Put(keySchemaVersion, v[:])
	})
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("Open of a newer schema: %v, want ErrNewerSchema", err)
	}
}

func TestCorruptRecordDoesNotHideOthers(t *testing.T) {
	db := open(t, Path(t.TempDir()))
	if err := db.PutTaskHandle(handle("mock", "good")); err != nil {
		t.Fatal(err)
	}
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTaskHandles).Put([]byte("bad"), []byte{0xff, 0xff, 0xff})
	})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := db.TaskHandles()
	var re *RecordError
	if !errors.As(err, &re) || re.Bucket != "task_handles" || re.Key != "bad" {
		t.Fatalf("error %v, want a RecordError for task_handles/bad", err)
	}
	if len(hs) != 1 || hs[0].GetHandle().GetConfig().GetId() != "good" {
		t.Fatalf("good records: %v", hs)
	}
	if _, _, err := db.TaskHandle("bad"); !errors.As(err, &re) {
		t.Fatalf("TaskHandle(bad): %v, want a RecordError", err)
	}
}

func TestPutRefusesRecordsWithoutKeys(t *testing.T) {
	db := open(t, Path(t.TempDir()))
	bad := []error{
		db.PutTaskHandle(&pb.TaskHandleRecord{Driver: "mock"}),
		db.PutTaskHandle(handle("", "t1")),
		db.PutTaskHandle(handle("mock", "../escape")),
		db.PutDriverPlugin(&pb.DriverPluginRecord{Name: "mock"}),
		db.PutDriverPlugin(plugin("", 1)),
	}
	for i, err := range bad {
		if !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("bad record %d: %v, want ErrInvalidRecord", i, err)
		}
	}
	if hs, _ := db.TaskHandles(); len(hs) != 0 {
		t.Fatalf("refused records were stored: %v", hs)
	}
}

// FuzzDecode feeds arbitrary bytes, as a damaged file would hold them, to
// the record decoder: it must return a record or a RecordError, never panic.
func FuzzDecode(f *testing.F) {
	good, _ := proto.Marshal(handle("raw_exec", "t1"))
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decode(bucketTaskHandles, []byte("k"), data, func() *pb.TaskHandleRecord { return &pb.TaskHandleRecord{} })
		var re *RecordError
		if err != nil && (!errors.As(err, &re) || re.Key != "k") {
			t.Fatalf("error %v is not a RecordError for key k", err)
		}
		if err == nil && rec == nil {
			t.Fatal("no record and no error")
		}
	})
}

// WithoutSync opens a DB that works like any other (it only skips fsync).
func TestOpenWithoutSync(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := Open(path, WithoutSync())
	if err != nil {
		t.Fatal(err)
	}
	if db.Synced() {
		t.Fatal("WithoutSync did not set NoSync")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if !db.Synced() {
		t.Fatal("a DB opened without options skips fsync")
	}
}
