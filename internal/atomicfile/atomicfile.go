// Package atomicfile replaces small files so that a crash leaves either the
// old or the new content, never a torn one: the node ID, the server ID and
// the client's record of its dynamic host volumes are written this way.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data, mode 0600: it makes path's directory
// (0700) if missing, writes a temporary file beside path, fsyncs it,
// renames it over path and fsyncs the directory, so the rename itself
// survives a crash.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
