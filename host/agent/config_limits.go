package agent

import (
	"math"

	"github.com/zclconf/go-cty/cty"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/host/volumespec"
	"berth.dev/berth/rpc"
)

// checkJobLimit checks a server.job_max_* count: a limit of zero would
// refuse every job, so each is at least 1.
func checkJobLimit[T int | int64](n T) error {
	if n < 1 {
		return invalidf("must be at least 1, got %d", n)
	}
	return nil
}

// checkJobMaxSize bounds server.job_max_size by what every hop a job
// travels carries (jobspec.MaxJobBytesCeiling): a larger job would be
// accepted and then refused on its way to its driver.
func checkJobMaxSize(n int) error {
	if n < 1 || n > jobspec.MaxJobBytesCeiling {
		return invalidf("%d bytes is out of range 1-%d (the largest job whose copies - as a JSON request body, the kept versions, a plan - fit the %d-byte message limit of the API, raft and plugin hops)",
			n, jobspec.MaxJobBytesCeiling, rpc.MaxMessageSize)
	}
	return nil
}

// toByteSize reads a size: a number of bytes, or a string such as "4MiB"
// or "500KB" (volumespec.ParseBytes).
func toByteSize(v cty.Value) (int, error) {
	if !v.IsNull() && v.Type() == cty.String {
		n, err := volumespec.ParseBytes(v.AsString())
		if err != nil {
			return 0, invalidf("%v", err)
		}
		if n > math.MaxInt32 {
			return 0, invalidf("%q is too large", v.AsString())
		}
		return int(n), nil
	}
	if !v.IsNull() && v.Type() == cty.Number {
		return toInt(v)
	}
	return 0, configStyle.WrongType(`size (like "4MiB", or a number of bytes)`, v)
}

// toByteSize64 reads a size that may pass 2 GiB: a number of bytes, or a
// string such as "8GiB" (volumespec.ParseBytes).
func toByteSize64(v cty.Value) (int64, error) {
	if !v.IsNull() && v.Type() == cty.String {
		n, err := volumespec.ParseBytes(v.AsString())
		if err != nil {
			return 0, invalidf("%v", err)
		}
		return n, nil
	}
	if !v.IsNull() && v.Type() == cty.Number {
		return toInt64(v)
	}
	return 0, configStyle.WrongType(`size (like "4GiB", or a number of bytes)`, v)
}
