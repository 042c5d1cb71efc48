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
