package hostpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestRecordFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "volume.json")
	in := volumeRecord{Version: recordVersion, ID: "vol-0123456789abcdef01234567", Name: "n", Kind: kindMount, CapacityBytes: 42,
		Attachments: map[string]*attachment{"n1": {ReadOnly: true, Capability: []byte(`{"mount":{}}`)}}}
	if err := writeRecord(path, in); err != nil {
		t.Fatal(err)
	}
	var out volumeRecord
	if err := readRecord(path, &out); err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || out.CapacityBytes != 42 || !out.Attachments["n1"].ReadOnly {
		t.Fatalf("read back %+v", out)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left next to the record: %v", entries)
	}
	if err := readRecord(filepath.Join(dir, "missing.json"), &out); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing record: %v, want fs.ErrNotExist", err)
	}
	for name, content := range map[string]string{
		"future.json":  `{"version": 99, "id": "x"}`,
		"garbage.json": `{"version": 1, "id": `,
		"empty.json":   ``,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		var re *RecordError
		if err := readRecord(p, &out); !errors.As(err, &re) || re.Path != p {
			t.Errorf("%s: %v, want a RecordError naming the file", name, err)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"version":1,"id":"vol-0123456789abcdef01234567","kind":"mount","capacity_bytes":1,"attachments":{"n":{"readonly":true}}}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var v volumeRecord
		err := decodeRecord("volume.json", data, &v)
		if err == nil && v.Version != recordVersion {
			t.Fatalf("accepted a record of version %d", v.Version)
		}
		var re *RecordError
		if err != nil && !errors.As(err, &re) {
			t.Fatalf("error %v is not a RecordError", err)
		}
		var n nodeVolumeRecord
		_ = decodeRecord("node.json", data, &n)
	})
}

func TestPoolIDCreatedOnce(t *testing.T) {
	lay := layout{root: t.TempDir()}
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			id, err := lay.poolID()
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || id == "" {
			t.Fatalf("concurrent first uses saw pool IDs %v", ids)
		}
	}
	if err := os.WriteFile(lay.path("pool"), []byte("not a/valid id\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := lay.poolID(); err == nil || !strings.Contains(err.Error(), lay.path("pool")) {
		t.Fatalf("malformed pool file: %v, want an error naming it", err)
	}
}
