package pluginproc

import (
	"strings"
	"testing"
	"time"
)

func TestBackoffDoublesUpToItsCap(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 10 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := b.Delay(i + 1); got != w {
			t.Errorf("Delay(%d) = %s, want %s", i+1, got, w)
		}
	}
	if got := b.Delay(1000); got != b.Max {
		t.Errorf("Delay(1000) = %s, want the cap %s", got, b.Max)
	}
	if got := b.Delay(0); got != b.Initial {
		t.Errorf("Delay(0) = %s, want %s", got, b.Initial)
	}
}

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
