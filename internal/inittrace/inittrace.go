// Package inittrace reads the Go runtime's package-initialisation trace
// (GODEBUG=inittrace=1): one line per package whose initialisation ran
// code, with its clock time and what it allocated. The bench's cli
// section prints what berth's start-up spends, and the root package's
// start-up test pins which packages may spend it.
package inittrace

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Init is one package's initialisation.
type Init struct {
	Package string
	// Clock is the wall time its init functions and variable
	// initialisers ran.
	Clock time.Duration
	// Bytes and Allocs are what they allocated on the heap.
	Bytes, Allocs int64
}

// Parse reads the trace lines in out (a program's standard error); other
// lines are skipped. A trace line is
//
//	init PKG @T ms, C ms clock, B bytes, A allocs
func Parse(out []byte) ([]Init, error) {
	var inits []Init
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 11 || f[0] != "init" || !strings.HasPrefix(f[2], "@") || f[6] != "clock," || f[8] != "bytes," || f[10] != "allocs" {
			continue
		}
		ms, err1 := strconv.ParseFloat(f[4], 64)
		b, err2 := strconv.ParseInt(f[7], 10, 64)
		a, err3 := strconv.ParseInt(f[9], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("inittrace: unexpected line %q", sc.Text())
		}
		inits = append(inits, Init{Package: f[1], Clock: time.Duration(ms * float64(time.Millisecond)), Bytes: b, Allocs: a})
	}
	return inits, sc.Err()
}

// Run runs bin with args under GODEBUG=inittrace=1 (standard output
// discarded) and returns its trace.
func Run(bin string, args ...string) ([]Init, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, stderr.Bytes())
	}
	inits, err := Parse(stderr.Bytes())
	if err == nil && len(inits) == 0 {
		err = fmt.Errorf("%s %s printed no initialisation trace", bin, strings.Join(args, " "))
	}
	return inits, err
}
