package chaos

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// logRecord is one line a writer appended to a volume's log.
type logRecord struct {
	alloc string
	seq   int
	at    int64
}

// checkVolumeLog reads a volume's log and reports two writers in it: the
// records of an alloc resumed after another alloc's records began (two
// processes wrote in turns under the lock), or a line that is not a whole
// record (writes not serialized). It returns how many records and writers
// the log holds.
func checkVolumeLog(path string) (records, writers int, violations []string) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, []string{err.Error()}
	}
	defer f.Close()
	done := map[string]logRecord{} // writers that a later writer followed: their last record
	var cur *logRecord
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			violations = append(violations, fmt.Sprintf("%s:%d: not a record: %q", path, line, sc.Text()))
			continue
		}
		seq, err1 := strconv.Atoi(fs[1])
		at, err2 := strconv.ParseInt(fs[2], 10, 64)
		if err1 != nil || err2 != nil {
			violations = append(violations, fmt.Sprintf("%s:%d: not a record: %q", path, line, sc.Text()))
			continue
		}
		r := logRecord{fs[0], seq, at}
		records++
		if cur != nil && cur.alloc != r.alloc {
			done[cur.alloc] = *cur
			if prev, ok := done[r.alloc]; ok {
				violations = append(violations, fmt.Sprintf("%s:%d: two writers: alloc %s wrote again (seq %d at %s) after alloc %s wrote (seq %d at %s); its previous record was seq %d at %s",
					path, line, r.alloc, r.seq, stamp(r.at), cur.alloc, cur.seq, stamp(cur.at), prev.seq, stamp(prev.at)))
			}
		}
		if cur == nil || cur.alloc != r.alloc {
			if _, ok := done[r.alloc]; !ok {
				writers++
			}
		}
		cur = &r
	}
	if err := sc.Err(); err != nil {
		violations = append(violations, fmt.Sprintf("%s: %v", path, err))
	}
	return records, writers, violations
}

func stamp(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 3, 64)
}

// volumeLogs finds each job volume's log in the plugin's state directory.
func volumeLogs(stateDir string) ([]string, error) {
	var logs []string
	err := filepath.WalkDir(stateDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "log" {
			logs = append(logs, p)
		}
		return nil
	})
	return logs, err
}

// panics greps every log under dir (agents' and tasks') for a Go panic or
// a fatal runtime error.
func panics(dir string) []string {
	var found []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if !strings.HasSuffix(p, ".log") && !strings.Contains(p, "/logs/") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for i, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") || strings.Contains(l, "goroutine ") && strings.Contains(l, "[running]") {
				found = append(found, fmt.Sprintf("%s:%d: %s", p, i+1, l))
			}
		}
		return nil
	})
	return found
}
