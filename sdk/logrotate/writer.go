package logrotate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Defaults for a Config that leaves a limit at zero.
const (
	DefaultMaxFiles = 10
	DefaultMaxBytes = 10 << 20
)

// Config says where a stream goes and how much of it to keep.
type Config struct {
	// Dir is the directory of the files; it is created if missing.
	Dir string
	// Name is the file name prefix, e.g. "web.stdout".
	Name string
	// MaxFiles is how many files to keep (at least 1).
	MaxFiles int
	// MaxBytes is the size at which a file is rotated.
	MaxBytes int64
}

// Writer is an io.WriteCloser over rotating files. It is safe for
// concurrent use.
type Writer struct {
	cfg Config

	mu    sync.Mutex
	f     *os.File
	index int
	size  int64
}

// Open opens the stream, continuing in its newest file if there is one.
func Open(cfg Config) (*Writer, error) {
	if cfg.Name == "" || strings.ContainsRune(cfg.Name, filepath.Separator) {
		return nil, fmt.Errorf("logrotate: invalid name %q", cfg.Name)
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = DefaultMaxFiles
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("logrotate: %w", err)
	}
	indexes, err := Indexes(cfg.Dir, cfg.Name)
	if err != nil {
		return nil, err
	}
	w := &Writer{cfg: cfg}
	if len(indexes) > 0 {
		w.index = indexes[len(indexes)-1]
	}
	f, size, err := w.openFile(w.index)
	if err != nil {
		return nil, err
	}
	w.f, w.size = f, size
	return w, w.prune()
}

// Path returns the path of file index of the stream.
func (c Config) Path(index int) string {
	return filepath.Join(c.Dir, c.Name+"."+strconv.Itoa(index))
}

// Indexes returns the indexes of the stream's files in dir, ascending.
func Indexes(dir, name string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("logrotate: %w", err)
	}
	var out []int
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), name+".")
		if !ok {
			continue
		}
		if i, err := strconv.Atoi(rest); err == nil && i >= 0 && strconv.Itoa(i) == rest {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out, nil
}

// openFile opens file index of the stream for appending and returns it
// with its size.
func (w *Writer) openFile(index int) (*os.File, int64, error) {
	f, err := os.OpenFile(w.cfg.Path(index), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("logrotate: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("logrotate: %w", err)
	}
	return f, st.Size(), nil
}

// Write writes p, splitting it across files so none exceeds MaxBytes.
// An error (a full disk, a file that cannot be created) loses only the
// rest of p: the next Write tries again, so output resumes once the cause
// clears. After Close it returns os.ErrClosed.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return 0, os.ErrClosed
	}
	written := 0
	for len(p) > 0 {
		if w.size >= w.cfg.MaxBytes {
			if err := w.rotate(); err != nil {
				return written, err
			}
		}
		chunk := p
		if room := w.cfg.MaxBytes - w.size; int64(len(chunk)) > room {
			chunk = chunk[:room]
		}
		n, err := w.f.Write(chunk)
		written += n
		w.size += int64(n)
		if err != nil {
			return written, fmt.Errorf("logrotate: %w", err)
		}
		p = p[n:]
	}
	return written, nil
}

// rotate moves on to the next file. The next file is opened before the
// current one is closed, so a failure leaves the writer as it was and a
// later Write retries.
func (w *Writer) rotate() error {
	f, size, err := w.openFile(w.index + 1)
	if err != nil {
		return err
	}
	old := w.f
	w.f, w.size = f, size
	w.index++
	if err := old.Close(); err != nil {
		return fmt.Errorf("logrotate: %w", err)
	}
	return w.prune()
}

// prune deletes files older than the newest MaxFiles.
func (w *Writer) prune() error {
	indexes, err := Indexes(w.cfg.Dir, w.cfg.Name)
	if err != nil {
		return err
	}
	for _, i := range indexes {
		if i <= w.index-w.cfg.MaxFiles {
			if err := os.Remove(w.cfg.Path(i)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("logrotate: %w", err)
			}
		}
	}
	return nil
}

// Close closes the current file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}
