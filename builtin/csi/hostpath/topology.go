package hostpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// The plugin's topology model: every node reports the segments it was given
// (--topology) plus the pool segment, the identity of its state directory.
// A volume records the one topology it was placed in (always including the
// pool); it is accessible from every node whose segments include all of it.

func nodeTopology(configured map[string]string, pool string) map[string]string {
	t := make(map[string]string, len(configured)+1)
	for k, v := range configured {
		t[k] = v
	}
	t[PoolTopologyKey] = pool
	return t
}

// covers reports whether a node with segments node lies in topology t.
func covers(node, t map[string]string) bool {
	for k, v := range t {
		if node[k] != v {
			return false
		}
	}
	return true
}

// accessibleFrom reports whether a volume placed in topologies can be used by
// a node with the given segments.
func accessibleFrom(topologies []map[string]string, node map[string]string) bool {
	for _, t := range topologies {
		if covers(node, t) {
			return true
		}
	}
	return len(topologies) == 0
}

func toCSITopologies(ts []map[string]string) []*csi.Topology {
	out := make([]*csi.Topology, 0, len(ts))
	for _, t := range ts {
		out = append(out, &csi.Topology{Segments: copyMap(t)})
	}
	return out
}

func formatTopology(t map[string]string) string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + t[k]
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// candidates lists the topologies a request allows, preferred ones first.
func candidates(req *csi.TopologyRequirement) []map[string]string {
	var out []map[string]string
	for _, t := range req.GetPreferred() {
		out = append(out, t.GetSegments())
	}
	for _, t := range req.GetRequisite() {
		out = append(out, t.GetSegments())
	}
	return out
}

// placeVolume chooses where a new volume lives: the first allowed topology
// (preferred before requisite) that lies in this pool and holds at least one
// registered node. With no requirement the volume spans the whole pool.
func placeVolume(req *csi.TopologyRequirement, pool string, nodes []nodeRecord) (map[string]string, error) {
	cands := candidates(req)
	if len(cands) == 0 {
		return map[string]string{PoolTopologyKey: pool}, nil
	}
	for _, c := range cands {
		if p, ok := c[PoolTopologyKey]; ok && p != pool {
			continue
		}
		t := copyMap(c)
		if t == nil {
			t = map[string]string{}
		}
		t[PoolTopologyKey] = pool
		for _, n := range nodes {
			if covers(n.Topology, t) {
				return t, nil
			}
		}
	}
	var want []string
	for _, c := range cands {
		want = append(want, formatTopology(c))
	}
	return nil, fmt.Errorf("no registered node of pool %s lies in any requested topology %s", pool, strings.Join(want, ", "))
}

// satisfies reports whether a volume's placement meets a requirement: some
// allowed topology contains the volume's.
func satisfies(volume []map[string]string, req *csi.TopologyRequirement) bool {
	cands := candidates(req)
	if len(cands) == 0 {
		return true
	}
	for _, c := range cands {
		for _, t := range volume {
			if covers(t, c) {
				return true
			}
		}
	}
	return false
}

// loadNodes reads every node registration in the state directory.
func (l layout) loadNodes() ([]nodeRecord, error) {
	entries, err := os.ReadDir(l.nodesDir())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []nodeRecord
	for _, e := range entries {
		if !e.IsDir() || !validNodeID(e.Name()) {
			continue
		}
		n, err := l.loadNode(e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func (l layout) loadNode(id string) (nodeRecord, error) {
	var n nodeRecord
	if !validNodeID(id) {
		return n, fs.ErrNotExist
	}
	err := readRecord(l.path("nodes", id, "node.json"), &n)
	return n, err
}
