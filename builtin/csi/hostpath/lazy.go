package hostpath

import (
	"regexp"
	"sync"
)

// lazyRegexp compiles expr on the first call of the returned function.
// Every berth command links this package (the binary is one), so whatever
// it compiles at package initialisation each CLI command pays at start-up;
// counted repeats such as {0,127} make a compile dear. The main package's
// TestStartupInitialisesLittle pins what packages may allocate at start.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
