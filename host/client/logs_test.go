package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/logrotate"
)

// logFiles lists a stream's files as the alloc runners do: paths, oldest
// first.
func logFiles(dir, name string) func() ([]string, error) {
	return func() ([]string, error) {
		idx, err := logrotate.Indexes(dir, name)
		if err != nil {
			return nil, err
		}
		c := logrotate.Config{Dir: dir, Name: name}
		out := make([]string, len(idx))
		for i, n := range idx {
			out[i] = c.Path(n)
		}
		return out, nil
	}
}

// writeLog writes data through a rotating writer of 10-byte files.
func writeLog(t *testing.T, dir, name string, data string) *logrotate.Writer {
	t.Helper()
	w, err := logrotate.Open(logrotate.Config{Dir: dir, Name: name, MaxBytes: 10, MaxFiles: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if _, err := w.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	return w
}

// collected records the frames a reader sends.
type collected struct {
	mu     sync.Mutex
	frames []*pb.LogsFrame
}

func (c *collected) send(f *pb.LogsFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frames = append(c.frames, &pb.LogsFrame{Data: bytes.Clone(f.GetData()), File: f.GetFile(), Offset: f.GetOffset()})
	return nil
}

func (c *collected) data() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, f := range c.frames {
		b.Write(f.GetData())
	}
	return b.String()
}

// where lists each frame as file@offset:data.
func (c *collected) where() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, f := range c.frames {
		out = append(out, fmt.Sprintf("%s@%d:%s", f.GetFile(), f.GetOffset(), f.GetData()))
	}
	return out
}

func read(t *testing.T, files func() ([]string, error), origin string, offset int64) *collected {
	t.Helper()
	r, err := newLogReader(files, origin, offset, logOptions{chunk: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	var c collected
	if err := r.run(context.Background(), false, nil, c.send); err != nil {
		t.Fatal(err)
	}
	return &c
}

const alphabet = "abcdefghijklmnopqrstuvwxyz0123" // 30 bytes: three full files

func TestLogsReadFromStartWithOffsetAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, "web.stdout", alphabet+"tail")
	files := logFiles(dir, "web.stdout")

	if got := read(t, files, "start", 0).data(); got != alphabet+"tail" {
		t.Fatalf("from start: %q", got)
	}
	c := read(t, files, "start", 15)
	if got := c.data(); got != alphabet[15:]+"tail" {
		t.Fatalf("from start+15: %q", got)
	}
	// Frames say where their data is: file and offset within it (chunks of 4).
	want := []string{"web.stdout.1@5:pqrs", "web.stdout.1@9:t", "web.stdout.2@0:uvwx", "web.stdout.2@4:yz01", "web.stdout.2@8:23", "web.stdout.3@0:tail"}
	if got := c.where(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("frames %v\nwant %v", got, want)
	}
	if got := read(t, files, "", 2).data(); got != alphabet[2:]+"tail" {
		t.Fatalf("empty origin is start: %q", got)
	}
}

func TestLogsReadFromEndWithOffsetAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, "web.stdout", alphabet+"tail")
	files := logFiles(dir, "web.stdout")

	if got := read(t, files, "end", 0).data(); got != "" {
		t.Fatalf("from end: %q, want nothing", got)
	}
	if got := read(t, files, "end", 6).data(); got != "23tail" {
		t.Fatalf("last 6 bytes: %q", got)
	}
	if got := read(t, files, "end", 17).data(); got != alphabet[17:]+"tail" {
		t.Fatalf("last 17 bytes: %q", got)
	}
}

func TestLogsOffsetsPastTheEnds(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, "web.stdout", alphabet)
	files := logFiles(dir, "web.stdout")
	if got := read(t, files, "start", 1000).data(); got != "" {
		t.Fatalf("start past the end: %q, want nothing", got)
	}
	if got := read(t, files, "end", 1000).data(); got != alphabet {
		t.Fatalf("end past the start: %q, want everything", got)
	}
	if got := read(t, logFiles(dir, "none.stdout"), "start", 0).data(); got != "" {
		t.Fatalf("a task without logs: %q", got)
	}
}

func TestLogsRefuseABadOriginOrOffset(t *testing.T) {
	files := logFiles(t.TempDir(), "web.stdout")
	for _, tt := range []struct {
		origin string
		offset int64
	}{{"middle", 0}, {"start", -1}} {
		if _, err := newLogReader(files, tt.origin, tt.offset, logOptions{}); !errors.Is(err, ErrBadLogRequest) {
			t.Errorf("origin %q offset %d: %v; want ErrBadLogRequest", tt.origin, tt.offset, err)
		}
	}
}

// follow runs a following reader until the test ends.
func follow(t *testing.T, files func() ([]string, error), origin string, offset int64) *collected {
	t.Helper()
	r, err := newLogReader(files, origin, offset, logOptions{poll: 5 * time.Millisecond, chunk: 7})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var c collected
	go func() { done <- r.run(ctx, true, nil, c.send) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("following reader: %v", err)
		}
		r.close()
	})
	return &c
}

func waitData(t *testing.T, c *collected, want string) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if got := c.data(); got != want {
			return fmt.Errorf("followed %q, want %q", got, want)
		}
		return nil
	})
}

func TestLogsFollowPicksUpAppendedDataAndRotation(t *testing.T) {
	dir := t.TempDir()
	w := writeLog(t, dir, "web.stdout", "0123")
	c := follow(t, logFiles(dir, "web.stdout"), "end", 2)
	waitData(t, c, "23")

	// Appends within the file, then across several rotations, in small
	// writes and one large one.
	want := "23"
	for _, s := range []string{"45", "6789", "abcdefghij", "k", strings.Repeat("xyz", 20)} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		want += s
		waitData(t, c, want)
	}
	// Every frame's offset is where its data is in its file.
	for _, f := range c.frames {
		idx, _ := fileIndex(f.GetFile())
		if got := f.GetOffset() + int64(len(f.GetData())); got > 10 || idx > 8 {
			t.Fatalf("frame %s@%d (%d bytes) is outside its 10-byte file", f.GetFile(), f.GetOffset(), len(f.GetData()))
		}
	}
}

func TestLogsFollowWaitsForTheFirstFile(t *testing.T) {
	dir := t.TempDir()
	c := follow(t, logFiles(dir, "web.stderr"), "start", 0)
	// The task writes its first output after the reader started.
	w := writeLog(t, dir, "web.stderr", "boot")
	waitData(t, c, "boot")
	if _, err := w.Write([]byte(" failed: 0123456789")); err != nil {
		t.Fatal(err)
	}
	waitData(t, c, "boot failed: 0123456789")
	if got := filepath.Ext(c.frames[0].GetFile()); got != ".0" {
		t.Fatalf("first frame from %s, want file .0", c.frames[0].GetFile())
	}
}

// TestLogsFollowEndsOnceTheTaskIsDead: a followed log ends, without an
// error, once the task is dead, after sending everything the task wrote,
// the files it rotated to after the reader last looked included. Before,
// a follow ended only when the caller hung up, so `alloc logs -f` of a
// finished task never exited.
func TestLogsFollowEndsOnceTheTaskIsDead(t *testing.T) {
	dir := t.TempDir()
	w := writeLog(t, dir, "job.stdout", "0123")
	r, err := newLogReader(logFiles(dir, "job.stdout"), "start", 0, logOptions{poll: 5 * time.Millisecond, chunk: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	var dead atomic.Bool
	var asked atomic.Int64
	var c collected
	done := make(chan error, 1)
	go func() {
		done <- r.run(context.Background(), true, func() bool { asked.Add(1); return dead.Load() }, c.send)
	}()
	waitData(t, &c, "0123")
	// Still alive: the follow goes on past the end of what is written.
	n := asked.Load()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if asked.Load() < n+2 {
			return errors.New("the reader has not looked again")
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("the follow of a live task ended: %v", err)
	default:
	}
	// The task's last words, across two rotations, then it is dead.
	if _, err := w.Write([]byte("456789abcdefghij-last")); err != nil {
		t.Fatal(err)
	}
	dead.Store(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the follow ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follow of a dead task did not end")
	}
	if got, want := c.data(), "0123456789abcdefghij-last"; got != want {
		t.Fatalf("followed %q, want %q", got, want)
	}
}
