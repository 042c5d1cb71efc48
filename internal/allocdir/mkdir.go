package allocdir

import "os"

// mkdir is os.MkdirAll for a dir whose parent is usually there already (an
// alloc's and a task's dirs are made parent first): one mkdir call, where
// MkdirAll stats the path and its parent before it. Anything else (the
// parent missing, the path already there, as a dir or not) is MkdirAll's
// answer.
func mkdir(path string, perm os.FileMode) error {
	if os.Mkdir(path, perm) == nil {
		return nil
	}
	return os.MkdirAll(path, perm)
}
