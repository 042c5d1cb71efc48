package pluginproc

import (
	"strings"
	"testing"
)

func TestTailWriterKeepsLastLinesAndShortensJSONLogs(t *testing.T) {
	var w TailWriter
	if w.Summary() != "" {
		t.Fatalf("empty summary %q", w.Summary())
	}
	w.Write([]byte("one\ntwo\n"))
	w.Write([]byte(`{"@level":"error","@message":"cannot open device","error":"permission denied","@module":"x"}`))
	w.Write([]byte("\nthree\nfour\nfi"))
	w.Write([]byte("ve"))
	got := w.Summary()
	want := "; last output: error: cannot open device: permission denied | three | four | five"
	if !strings.HasPrefix(got, "; last output: ") || got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
	w.Write([]byte(strings.Repeat("x", 5000)))
	if s := w.Summary(); len(s) > 2000 {
		t.Fatalf("summary of a huge line is %d bytes", len(s))
	}
}
