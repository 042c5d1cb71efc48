package logrotate

import (
	"fmt"
	"os"
	"testing"
)

func readAll(t *testing.T, c Config) (map[int]string, []int) {
	t.Helper()
	idx, err := Indexes(c.Dir, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, i := range idx {
		data, err := os.ReadFile(c.Path(i))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(data)
	}
	return out, idx
}

func TestRotatesSplitsAndPrunes(t *testing.T) {
	c := Config{Dir: t.TempDir(), Name: "web.stdout", MaxFiles: 3, MaxBytes: 10}
	w, err := Open(c)
	if err != nil {
		t.Fatal(err)
	}
	// 53 bytes in writes that straddle file boundaries: six files, the
	// newest three kept.
	for _, chunk := range []string{"0123", "456789abcdefghij", "klmnopqrstuvwxyzABCDEFGHIJKLMNOPQ", ""} {
		if n, err := w.Write([]byte(chunk)); err != nil || n != len(chunk) {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, idx := readAll(t, c)
	if fmt.Sprint(idx) != "[3 4 5]" {
		t.Fatalf("indexes %v, want [3 4 5]", idx)
	}
	if files[3] != "uvwxyzABCD" || files[4] != "EFGHIJKLMN" || files[5] != "OPQ" {
		t.Errorf("files %v", files)
	}
	// Reopening continues in the newest file, then rotates on.
	w, err = Open(c)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("RSTUVWXYZ!"))
	w.Close()
	files, idx = readAll(t, c)
	if fmt.Sprint(idx) != "[4 5 6]" {
		t.Fatalf("indexes after reopen %v, want [4 5 6]", idx)
	}
	if files[5] != "OPQRSTUVWX" || files[6] != "YZ!" {
		t.Errorf("after reopen %v", files)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Error("write after Close succeeded")
	}
}

func TestIndexesIgnoreOtherFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"web.stdout.0", "web.stdout.07", "web.stdout.x", "web.stderr.1", "web.stdout.12", "web.stdout.-1"} {
		if err := os.WriteFile(dir+"/"+n, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := Indexes(dir, "web.stdout")
	if err != nil || len(idx) != 2 || idx[0] != 0 || idx[1] != 12 {
		t.Errorf("Indexes = %v, %v; want [0 12]", idx, err)
	}
	if _, err := Open(Config{Dir: dir, Name: "a/b"}); err == nil {
		t.Error("a name with a slash was accepted")
	}
}

func TestFailedRotationRecovers(t *testing.T) {
	c := Config{Dir: t.TempDir(), Name: "web.stdout", MaxFiles: 3, MaxBytes: 4}
	w, err := Open(c)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// A directory where the next file goes makes the rotation fail.
	if err := os.Mkdir(c.Path(1), 0o755); err != nil {
		t.Fatal(err)
	}
	if n, err := w.Write([]byte("abcd")); err != nil || n != 4 {
		t.Fatalf("first Write = %d, %v", n, err)
	}
	if n, err := w.Write([]byte("lost")); err == nil || n != 0 {
		t.Fatalf("Write while the next file cannot be opened = %d, %v; want 0 and an error", n, err)
	}
	// The full file is kept as it was, not truncated or appended to.
	if data, _ := os.ReadFile(c.Path(0)); string(data) != "abcd" {
		t.Errorf("file 0 after the failed rotation: %q", data)
	}
	// Once the cause clears the writer carries on.
	if err := os.Remove(c.Path(1)); err != nil {
		t.Fatal(err)
	}
	if n, err := w.Write([]byte("efgh")); err != nil || n != 4 {
		t.Fatalf("Write after the cause cleared = %d, %v", n, err)
	}
	if data, _ := os.ReadFile(c.Path(1)); string(data) != "efgh" {
		t.Errorf("file 1: %q, want efgh", data)
	}
}
