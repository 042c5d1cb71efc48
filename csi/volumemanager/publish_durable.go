package volumemanager

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The publish path marks a use published (see teardown_marker.go): a use
// saved PUBLISHED whose path is gone after a restart is read as one whose
// teardown began. So the path must be on disk before the record that
// says PUBLISHED: the symlink's directory (and any directory made for it)
// is fsynced before the record is saved, else a power loss could keep the
// record (the state DB fsyncs) and lose the link, and a running alloc's
// volume would be taken for one being torn down. One fsync of a small
// directory on the publish path; the stop path adds none.

// syncDir fsyncs a directory, making the entries in it durable. A
// variable for tests that check the order.
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// missingDirs lists dir and those of its ancestors that do not exist, the
// nearest first.
func missingDirs(dir string) []string {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			return missing
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			return missing
		}
	}
}

// syncLinkDirs makes link's entry durable, and those of the directories
// made for it (created, listed by missingDirs before they were).
func syncLinkDirs(link string, created []string) error {
	dirs := []string{filepath.Dir(link)}
	for _, d := range created {
		dirs = append(dirs, filepath.Dir(d))
	}
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("making the publish path %s durable: %w", link, err)
		}
	}
	return nil
}
