package pluginproc

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// tailLines and tailLineLen bound what TailWriter keeps.
const (
	tailLines   = 4
	tailLineLen = 300
)

// TailWriter keeps the last lines a plugin wrote to stderr, so that a
// plugin that dies before its handshake is reported with its last words
// ("panic: ...", "error: ...") and not just "exited before we could
// connect".
type TailWriter struct {
	mu      sync.Mutex
	lines   []string
	partial []byte
}

// Write implements io.Writer.
func (w *TailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.add(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	if len(w.partial) > 4*tailLineLen {
		w.add(string(w.partial))
		w.partial = nil
	}
	return len(p), nil
}

func (w *TailWriter) add(line string) {
	line = strings.TrimSpace(logMessage(line))
	if line == "" {
		return
	}
	if len(line) > tailLineLen {
		line = line[:tailLineLen] + "..."
	}
	w.lines = append(w.lines, line)
	if len(w.lines) > tailLines {
		w.lines = w.lines[len(w.lines)-tailLines:]
	}
}

// logMessage shortens a JSON log line (what sdk.NewPluginLogger writes)
// to its level and message; other lines are returned as they are.
func logMessage(line string) string {
	var entry struct {
		Level   string `json:"@level"`
		Message string `json:"@message"`
		Error   string `json:"error"`
	}
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &entry) != nil || entry.Message == "" {
		return line
	}
	out := entry.Level + ": " + entry.Message
	if entry.Error != "" {
		out += ": " + entry.Error
	}
	return out
}

// Summary is "; last output: ..." for an error message, or "" when the
// plugin wrote nothing.
func (w *TailWriter) Summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := w.lines
	if len(w.partial) > 0 {
		lines = append(lines[:len(lines):len(lines)], strings.TrimSpace(string(w.partial)))
	}
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	if len(lines) == 0 {
		return ""
	}
	return "; last output: " + strings.Join(lines, " | ")
}
