package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"berth.dev/berth/rpc/pb"
)

// allocUpdatesKey prefixes the callCounter keys that count the alloc
// updates the nodes' ClientAllocs.Update calls carry, by client status
// (allocUpdatesKey + "RUNNING"): each is a row the servers write, on every
// server, so updates per alloc are a cost of the job apart from the calls.
const allocUpdatesKey = "alloc-updates/"

// countAllocUpdates counts the updates in req when it is an alloc update.
func countAllocUpdates(c *callCounter, req any) {
	r, ok := req.(*pb.ClientAllocUpdateRequest)
	if !ok {
		return
	}
	for _, u := range r.GetUpdates() {
		c.counter(allocUpdatesKey + strings.TrimPrefix(u.GetClientStatus().String(), "ALLOC_CLIENT_STATUS_")).Add(1)
	}
}

// allocUpdates sums, from two callCounter snapshots, the alloc updates
// sent between them, in all and by client status.
func allocUpdates(before, after map[string]int64) (total int64, byStatus map[string]int64) {
	byStatus = map[string]int64{}
	for k, n := range after {
		st, ok := strings.CutPrefix(k, allocUpdatesKey)
		if !ok {
			continue
		}
		if d := n - before[k]; d > 0 {
			byStatus[st] = d
			total += d
		}
	}
	return total, byStatus
}

// fmtCounts prints counts by name, sorted by name: "(PENDING 10, RUNNING 20)".
func fmtCounts(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
