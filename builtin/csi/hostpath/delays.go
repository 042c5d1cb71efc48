package hostpath

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// Fault injection. A plugin that is slow at one CSI method on purpose makes
// "the agent died while NodeStageVolume was in flight" a scenario a test can
// reach every time instead of by luck: the test starts the plugin with a
// delay on that method, waits for the marker file the held call leaves, and
// kills whatever it wants killed. Nothing else in the plugin changes; a
// plugin without delays pays one map lookup per call.

// maxDelay bounds one delay: longer would only hide a typo ("3m" for "3s")
// behind a test that hangs until its deadline.
const maxDelay = 10 * time.Minute

// ErrBadDelay is returned (wrapped) by ParseDelays and by Run and Start for
// a malformed or unknown delay.
var ErrBadDelay = errcode.New(codes.InvalidArgument, "invalid delay")

// csiMethods are the method names of every CSI service, the names a delay
// may use.
var csiMethods = func() []string {
	var out []string
	for _, d := range []grpc.ServiceDesc{csi.Identity_ServiceDesc, csi.Controller_ServiceDesc, csi.Node_ServiceDesc, csi.GroupController_ServiceDesc} {
		for _, m := range d.Methods {
			out = append(out, m.MethodName)
		}
	}
	slices.Sort(out)
	return out
}()

// ParseDelays parses "Method=duration" elements (as given to --delay and
// --delay-after), e.g. "NodeStageVolume=3s", into a map from CSI method name
// to delay. The method is the bare name of a CSI RPC of any service; the
// duration is positive and at most 10m. A method given twice is an error.
func ParseDelays(specs []string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, spec := range specs {
		method, dur, ok := strings.Cut(strings.TrimSpace(spec), "=")
		if !ok {
			return nil, fmt.Errorf("%w %q: want Method=duration, e.g. NodeStageVolume=3s", ErrBadDelay, spec)
		}
		method = strings.TrimSpace(method)
		d, err := time.ParseDuration(strings.TrimSpace(dur))
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrBadDelay, spec, err)
		}
		if err := checkDelay(method, d); err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrBadDelay, spec, err)
		}
		if _, dup := out[method]; dup {
			return nil, fmt.Errorf("%w %q: %s already has a delay", ErrBadDelay, spec, method)
		}
		out[method] = d
	}
	return out, nil
}

func checkDelay(method string, d time.Duration) error {
	if _, found := slices.BinarySearch(csiMethods, method); !found {
		return fmt.Errorf("unknown CSI method %q (one of %s)", method, strings.Join(csiMethods, ", "))
	}
	if d <= 0 || d > maxDelay {
		return fmt.Errorf("delay %s of %s: want more than 0 and at most %s", d, method, maxDelay)
	}
	return nil
}

// validateDelays checks Config.DelayBefore and DelayAfter as ParseDelays
// checks flags, for callers that build the maps themselves.
func (c Config) validateDelays() error {
	for field, m := range map[string]map[string]time.Duration{"DelayBefore": c.DelayBefore, "DelayAfter": c.DelayAfter} {
		for _, method := range sortedKeys(m) {
			if err := checkDelay(method, m[method]); err != nil {
				return &ConfigError{Field: field, Value: fmt.Sprintf("%s=%s", method, m[method]), Err: errors.Join(ErrBadDelay, err)}
			}
		}
	}
	if c.DelayMarkerDir != "" && len(c.DelayBefore)+len(c.DelayAfter) == 0 {
		return &ConfigError{Field: "DelayMarkerDir", Value: c.DelayMarkerDir, Err: errors.New("set without any delay: no call would leave a marker")}
	}
	return nil
}

func sortedKeys(m map[string]time.Duration) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
