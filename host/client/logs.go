package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"berth.dev/berth/rpc/pb"
)

// logOptions tune the log reader; zero fields take the defaults.
type logOptions struct {
	// poll is how often a following reader looks for more data. Following
	// logs is not on any latency path that matters (run, stop), so a short
	// poll of one file's size is enough and needs no inotify.
	poll time.Duration
	// chunk bounds the data of one frame.
	chunk int
}

const (
	defaultLogPoll  = 250 * time.Millisecond
	defaultLogChunk = 64 << 10
)

// logReader reads a task's rotated log files ("web.stdout.0", ".1", ...)
// as one stream, from an origin, and optionally follows it as the task
// writes and the files rotate.
type logReader struct {
	files func() ([]string, error)
	opts  logOptions

	cur   *os.File // nil until the first file exists
	path  string
	index int
	pos   int64
}

// newLogReader positions a reader: origin "start" (or "") skips offset
// bytes from the beginning of the oldest file kept, "end" starts offset
// bytes before the end of the newest, counting across files. An offset
// past either end starts at the other.
func newLogReader(files func() ([]string, error), origin string, offset int64, opts logOptions) (*logReader, error) {
	if opts.poll <= 0 {
		opts.poll = defaultLogPoll
	}
	if opts.chunk <= 0 {
		opts.chunk = defaultLogChunk
	}
	if offset < 0 {
		return nil, fmt.Errorf("offset %d: %w: must not be negative", offset, ErrBadLogRequest)
	}
	if origin != "" && origin != "start" && origin != "end" {
		return nil, fmt.Errorf("origin %q: %w: want start or end", origin, ErrBadLogRequest)
	}
	r := &logReader{files: files, opts: opts, index: -1}
	list, err := files()
	if err != nil {
		return nil, err
	}
	type file struct {
		path string
		size int64
	}
	var kept []file
	for _, p := range list {
		// A file pruned since the listing is skipped.
		if st, err := os.Stat(p); err == nil {
			kept = append(kept, file{p, st.Size()})
		}
	}
	if len(kept) == 0 {
		return r, nil
	}
	if origin == "end" {
		for i := len(kept) - 1; i >= 0; i-- {
			if offset <= kept[i].size || i == 0 {
				return r, r.open(kept[i].path, max(kept[i].size-offset, 0))
			}
			offset -= kept[i].size
		}
	}
	for i, f := range kept {
		if offset < f.size || i == len(kept)-1 {
			return r, r.open(f.path, min(offset, f.size))
		}
		offset -= f.size
	}
	return r, nil
}

// fileIndex is the rotation index of a log file path ("web.stdout.3" → 3).
func fileIndex(path string) (int, bool) {
	i := strings.LastIndexByte(path, '.')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(path[i+1:])
	return n, err == nil && n >= 0
}

// open makes path, read from pos, the current file.
func (r *logReader) open(path string, pos int64) error {
	idx, ok := fileIndex(path)
	if !ok {
		return fmt.Errorf("log file %s has no rotation index", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	if _, err := f.Seek(pos, io.SeekStart); err != nil {
		f.Close()
		return err
	}
	r.close()
	r.cur, r.path, r.index, r.pos = f, path, idx, pos
	return nil
}

func (r *logReader) close() {
	if r.cur != nil {
		_ = r.cur.Close()
		r.cur = nil
	}
}

// drain sends what the current file holds past the reader's position.
func (r *logReader) drain(send func(*pb.LogsFrame) error) error {
	if r.cur == nil {
		return nil
	}
	buf := make([]byte, r.opts.chunk)
	for {
		n, err := r.cur.Read(buf)
		if n > 0 {
			if serr := send(&pb.LogsFrame{Data: buf[:n], File: filepath.Base(r.path), Offset: r.pos}); serr != nil {
				return serr
			}
			r.pos += int64(n)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", r.path, err)
		}
	}
}

// next opens the oldest file of list newer than the current one,
// reporting whether there was one.
func (r *logReader) next(list []string) (bool, error) {
	for _, p := range list {
		idx, ok := fileIndex(p)
		if !ok || idx <= r.index {
			continue
		}
		err := r.open(p, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue // pruned since the listing
		}
		return err == nil, err
	}
	return false, nil
}

// run sends the stream from the reader's position. Without follow it ends
// at the end of the newest file; with follow it waits for more (polling)
// until ctx ends, moving to each new file as the writer rotates, or until
// dead (nil: never) reports that the task will write no more and what it
// wrote has been sent. dead is asked before each pass over the files: a
// task's executor has copied all its output to them before the task is
// reported dead (sdk/executor), so the pass after the first true answer
// sends the rest and the stream ends, as Nomad's `alloc logs -f` does once
// the task is dead.
func (r *logReader) run(ctx context.Context, follow bool, dead func() bool, send func(*pb.LogsFrame) error) error {
	var tick *time.Ticker
	for {
		finished := follow && dead != nil && dead()
		if err := r.drain(send); err != nil {
			return err
		}
		list, err := r.files()
		if err != nil {
			return err
		}
		if hasNewer(list, r.index) {
			// The writer never writes a file again once it has created
			// the next one: what it wrote between the read above and the
			// rotation is read now, before moving on.
			if err := r.drain(send); err != nil {
				return err
			}
			moved, err := r.next(list)
			if err != nil {
				return err
			}
			if moved {
				continue
			}
		}
		if !follow || finished {
			return nil
		}
		if tick == nil {
			tick = time.NewTicker(r.opts.poll)
			defer tick.Stop()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func hasNewer(list []string, index int) bool {
	for _, p := range list {
		if idx, ok := fileIndex(p); ok && idx > index {
			return true
		}
	}
	return false
}
