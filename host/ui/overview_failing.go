package ui

import (
	"context"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// readyScanPages bounds the pages of ready claims the overview reads for
// the failing ones: ready is a state claims pass through, so there are
// few, but a cluster starting thousands of allocs at once must not make
// each overview render read them all.
const readyScanPages = 5

// failingReady reads the ready claims that carry an error, at most
// attentionRows of them: a claim whose stage or publish fails stays ready
// with its last error (an operator claim "left for the operator to
// release", an alloc's during its node plugin's wait), and is as stuck as
// one in a state on the way. more says the list was cut.
func failingReady(ctx context.Context, c *api.Client) (out []*pb.Claim, more bool, err error) {
	q := &api.QueryOptions{PerPage: 200, Params: map[string]string{"state": pb.EnumWord(pb.ClaimState_CLAIM_STATE_READY)}}
	pages := 0
	for page, err := range api.Pages(ctx, q, c.VolumeClaims().List) {
		if err != nil {
			return nil, false, err
		}
		for _, cl := range page.Items {
			if cl.GetLastError() == nil {
				continue
			}
			if len(out) == attentionRows {
				return out, true, nil
			}
			out = append(out, cl)
		}
		if pages++; pages == readyScanPages {
			return out, page.Meta.NextToken != "", nil
		}
	}
	return out, false, nil
}
