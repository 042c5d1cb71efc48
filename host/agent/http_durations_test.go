package agent

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/durations"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// A duration over durations.MaxMs in a request is refused naming the field
// and the maximum, rather than wrapping into a negative one: a drain
// deadline of 2^63-1 ms was accepted and, added to now, forced the drain at
// once. Up to the maximum, the deadline is read back in the future.
func TestRequestDurationsAreBounded(t *testing.T) {
	a := testAgent(t)
	id := a.Client().NodeID()
	r := do(t, a, "PUT", "/v1/node/"+id+"/drain", strings.NewReader(`{"drain": {"deadline_ms": 9223372036854775807}}`))
	r.wantError(t, 400, "invalid_argument", "drain deadline_ms must be -1 (force), 0 (none) or positive up to "+strconv.FormatInt(durations.MaxMs, 10))

	// A running alloc keeps the drain (and its deadline) in place.
	j := testJob("drained")
	j.Groups[0].Count = 1
	j.Groups[0].Tasks[0].Driver = "mock"
	do(t, a, "PUT", "/v1/jobs", strings.NewReader(registerBody(t, &pb.JobRegisterRequest{Job: j}))).wantOK(t, nil)
	testutil.WaitFor(t, 30*time.Second, func() error {
		r := do(t, a, "GET", "/v1/job/drained/allocations", nil)
		if !strings.Contains(string(r.body), `"client_status": "running"`) {
			return fmt.Errorf("not running: %s", r.body)
		}
		return nil
	})
	before := time.Now()
	r = do(t, a, "PUT", "/v1/node/"+id+"/drain", strings.NewReader(`{"drain": {"deadline_ms": `+strconv.FormatInt(durations.MaxMs, 10)+`}}`))
	r.wantOK(t, nil)
	n := &pb.Node{}
	do(t, a, "GET", "/v1/node/"+id, nil).wantOK(t, n)
	if at, want := n.GetDrain().GetForceDeadlineAt(), before.Add(durations.Max).UnixNano(); at < want {
		t.Errorf("drain with a deadline of %s: force_deadline_at %s, want at or after %s", durations.Max, time.Unix(0, at).UTC(), time.Unix(0, want).UTC())
	}

	j = testJob("slow-stop")
	j.Groups[0].Tasks[0].KillTimeoutMs = durations.MaxMs + 1
	r = do(t, a, "PUT", "/v1/jobs", strings.NewReader(registerBody(t, &pb.JobRegisterRequest{Job: j})))
	r.wantError(t, 400, "invalid_argument", "kill_timeout: must be at most "+durations.Max.String())
}
