package inittrace

import (
	"os"
	"testing"
	"time"
)

func TestParseReadsTraceLinesAndSkipsOthers(t *testing.T) {
	out := []byte(`init internal/bytealg @0.008 ms, 0 ms clock, 0 bytes, 0 allocs
berth v0.1.0
init github.com/prometheus/client_golang/prometheus @6.8 ms, 5.5 ms clock, 63872 bytes, 246 allocs
init not a trace line
`)
	got, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []Init{
		{Package: "internal/bytealg"},
		{Package: "github.com/prometheus/client_golang/prometheus", Clock: 5500 * time.Microsecond, Bytes: 63872, Allocs: 246},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := Parse([]byte("init p @1 ms, x ms clock, 1 bytes, 1 allocs\n")); err == nil {
		t.Error("a trace line with a malformed number parsed")
	}
}

// Run traces a real Go program: this test binary, which initialises at
// least the testing package.
func TestRunTracesAProgram(t *testing.T) {
	if os.Getenv("INITTRACE_CHILD") == "1" {
		return
	}
	t.Setenv("INITTRACE_CHILD", "1")
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	inits, err := Run(bin, "-test.run=^TestRunTracesAProgram$")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range inits {
		if in.Package == "testing" {
			return
		}
	}
	t.Fatalf("no init of package testing in %+v", inits)
}
