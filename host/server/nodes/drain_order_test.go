package nodes

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// orderNode builds a drainNode from a compact spec: each alloc as
// "id[:sys][:plugin=p,q][:marked]", holds as plugin → holders.
func orderNode(allocs []string, holds map[string][]string) *drainNode {
	dn := &drainNode{holders: map[string]map[string]bool{}}
	for _, spec := range allocs {
		parts := strings.Split(spec, ":")
		a := &drainAlloc{alloc: &pb.Allocation{Id: parts[0]}}
		for _, p := range parts[1:] {
			switch {
			case p == "sys":
				a.system = true
			case p == "marked":
				a.marked = true
			case strings.HasPrefix(p, "plugin="):
				a.plugins = strings.Split(strings.TrimPrefix(p, "plugin="), ",")
			default:
				panic("bad alloc spec " + spec)
			}
		}
		dn.live = append(dn.live, a)
	}
	for plugin, hs := range holds {
		for _, h := range hs {
			dn.hold(plugin, h)
		}
	}
	return dn
}

func allocIDs(as []*pb.Allocation) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.GetId())
	}
	sort.Strings(out)
	return out
}

// describe prints a plan as "mark=[..] plugins=[..] held=[..] cycle=[..] done".
func describe(p drainPlan) string {
	held := []string{}
	for id, by := range p.held {
		held = append(held, id+"<"+strings.Join(by, ","))
	}
	sort.Strings(held)
	cycle := append([]string{}, p.cycle...)
	s := fmt.Sprintf("mark=%v plugins=%v held=%v cycle=%v", allocIDs(p.mark), allocIDs(p.plugins), held, cycle)
	if p.done {
		s += " done"
	}
	return s
}

// TestDrainPlanOrder: the order of a drain, one node state at a time —
// what is marked now, in which write, and what waits for what.
func TestDrainPlanOrder(t *testing.T) {
	for _, tt := range []struct {
		name   string
		allocs []string
		holds  map[string][]string
		forced bool
		want   string
	}{
		{
			name:   "users and unrelated allocs first; the plugin and the system allocs wait",
			allocs: []string{"db", "web", "plug:sys:plugin=hp", "logs:sys"},
			holds:  map[string][]string{"hp": {"db"}},
			want:   "mark=[db web] plugins=[] held=[plug<db] cycle=[]",
		},
		{
			name:   "users marked and still running: nothing new",
			allocs: []string{"db:marked", "web:marked", "plug:sys:plugin=hp", "logs:sys"},
			holds:  map[string][]string{"hp": {"db"}},
			want:   "mark=[] plugins=[] held=[plug<db] cycle=[]",
		},
		{
			name: "the user stopped but its claim is still releasing: the other system allocs go, the plugin waits",
			// db is no longer live; its claim still holds hp.
			allocs: []string{"plug:sys:plugin=hp", "logs:sys"},
			holds:  map[string][]string{"hp": {"db"}},
			want:   "mark=[logs] plugins=[] held=[plug<db] cycle=[]",
		},
		{
			name:   "the claim is node-detached: the plugin goes, in the plugins' write",
			allocs: []string{"plug:sys:plugin=hp", "logs:sys:marked"},
			want:   "mark=[] plugins=[plug] held=[] cycle=[]",
		},
		{
			name:   "a system plugin without users still waits for the service allocs",
			allocs: []string{"web", "plug:sys:plugin=hp"},
			want:   "mark=[web] plugins=[] held=[] cycle=[]",
		},
		{
			name:   "a plugin in a service job is held too",
			allocs: []string{"db:marked", "plug:plugin=hp", "logs:sys"},
			holds:  map[string][]string{"hp": {"db"}},
			want:   "mark=[] plugins=[] held=[plug<db] cycle=[]",
		},
		{
			name:   "a held service plugin does not hold the system allocs back",
			allocs: []string{"plug:plugin=hp", "logs:sys"},
			holds:  map[string][]string{"hp": {"db"}},
			want:   "mark=[logs] plugins=[] held=[plug<db] cycle=[]",
		},
		{
			name:   "a service plugin whose only user is a system alloc: the user goes first",
			allocs: []string{"plug:plugin=hp", "agent:sys", "logs:sys"},
			holds:  map[string][]string{"hp": {"agent"}},
			want:   "mark=[agent logs] plugins=[] held=[plug<agent] cycle=[]",
		},
		{
			name:   "an operator's claim holds the plugin",
			allocs: []string{"plug:plugin=hp"},
			holds:  map[string][]string{"hp": {"claim c1"}},
			want:   "mark=[] plugins=[] held=[plug<claim c1] cycle=[]",
		},
		{
			name:   "a volume of an unknown plugin holds every plugin",
			allocs: []string{"db:marked", "p1:plugin=a", "p2:sys:plugin=b"},
			holds:  map[string][]string{anyPlugin: {"db"}},
			want:   "mark=[] plugins=[] held=[p1<db p2<db] cycle=[]",
		},
		{
			name:   "a plugin using its own volume does not wait for itself",
			allocs: []string{"plug:plugin=hp"},
			holds:  map[string][]string{"hp": {"plug"}},
			want:   "mark=[] plugins=[plug] held=[] cycle=[]",
		},
		{
			name:   "a monolith of two plugins waits for the users of either",
			allocs: []string{"plug:plugin=a,b", "db:marked"},
			holds:  map[string][]string{"b": {"db"}},
			want:   "mark=[] plugins=[] held=[plug<db] cycle=[]",
		},
		{
			name:   "a chain of plugins: each waits for its users",
			allocs: []string{"db:marked", "p1:plugin=a", "p2:plugin=b"},
			holds:  map[string][]string{"a": {"db"}, "b": {"p1"}},
			want:   "mark=[] plugins=[] held=[p1<db p2<p1] cycle=[]",
		},
		{
			name:   "two plugins using each other's volumes go together; one held by them waits",
			allocs: []string{"p1:plugin=a", "p2:plugin=b", "p3:plugin=c"},
			holds:  map[string][]string{"a": {"p2"}, "b": {"p1"}, "c": {"p1"}},
			want:   "mark=[] plugins=[p1 p2] held=[p3<p1] cycle=[p1 p2]",
		},
		{
			name:   "the cycle's plugins stopping: the one held by them still waits",
			allocs: []string{"p1:plugin=a:marked", "p2:plugin=b:marked", "p3:plugin=c"},
			holds:  map[string][]string{"a": {"p2"}, "b": {"p1"}, "c": {"p1"}},
			want:   "mark=[] plugins=[] held=[p3<p1] cycle=[]",
		},
		{
			name:   "at the deadline everything left goes, plugins in the second write",
			allocs: []string{"db:marked", "web", "plug:sys:plugin=hp", "svcplug:plugin=x", "logs:sys"},
			holds:  map[string][]string{"hp": {"db"}, "x": {"db"}},
			forced: true,
			want:   "mark=[logs web] plugins=[plug svcplug] held=[] cycle=[]",
		},
		{
			name: "nothing left: the drain is done",
			want: "mark=[] plugins=[] held=[] cycle=[] done",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := describe(orderNode(tt.allocs, tt.holds).plan(tt.forced))
			if got != tt.want {
				t.Errorf("plan:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestReleaseCyclesKeepsChainsThatMoveOn: a plugin held through a chain
// ending in a user that is not held is never taken for a cycle, however
// the map is iterated.
func TestReleaseCyclesKeepsChainsThatMoveOn(t *testing.T) {
	for range 50 {
		held := map[string][]string{"p1": {"db"}, "p2": {"p1"}, "p3": {"p2"}, "p4": {"p3", "p1"}}
		if cycle := releaseCycles(held); len(cycle) != 0 || len(held) != 4 {
			t.Fatalf("chain: released %v, held left %v", cycle, held)
		}
		held = map[string][]string{"p1": {"p2"}, "p2": {"p3"}, "p3": {"p1"}, "p4": {"p3"}, "p5": {"db"}}
		cycle := releaseCycles(held)
		if !slices.Equal(cycle, []string{"p1", "p2", "p3"}) {
			t.Fatalf("three-cycle: released %v, want p1 p2 p3", cycle)
		}
		if _, ok := held["p4"]; !ok || len(held) != 2 {
			t.Fatalf("three-cycle: held left %v, want p4 and p5", held)
		}
	}
}
