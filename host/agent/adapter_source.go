package agent

import (
	"sync"

	"google.golang.org/grpc"

	"berth.dev/berth/csi/adapters"
	"berth.dev/berth/csi/pluginmanager"
)

// adapterSource is the storage adapter manager as the CSI plugin manager
// sees it (pluginmanager.AdapterSource): the agent joins the two, so that
// neither package imports the other.
type adapterSource struct{ m *adapters.Manager }

var _ pluginmanager.AdapterSource = adapterSource{}

// adapterKinds maps the adapter manager's event kinds to the plugin
// manager's.
var adapterKinds = map[adapters.EventKind]pluginmanager.AdapterEventKind{
	adapters.EventStarted:     pluginmanager.AdapterStarted,
	adapters.EventReattached:  pluginmanager.AdapterReattached,
	adapters.EventHealthy:     pluginmanager.AdapterHealthy,
	adapters.EventUnhealthy:   pluginmanager.AdapterUnhealthy,
	adapters.EventExited:      pluginmanager.AdapterExited,
	adapters.EventStartFailed: pluginmanager.AdapterStartFailed,
}

func (s adapterSource) Names() []string { return s.m.Names() }

func (s adapterSource) Conn(name string) (grpc.ClientConnInterface, error) {
	h, err := s.m.Adapter(name)
	if err != nil {
		return nil, err
	}
	return h.Conn(), nil
}

func (s adapterSource) State(name string) (pluginmanager.AdapterState, error) {
	h, err := s.m.Adapter(name)
	if err != nil {
		return pluginmanager.AdapterState{}, err
	}
	st := h.State()
	return pluginmanager.AdapterState{Running: st.Running, Healthy: st.Healthy, Reason: st.Reason}, nil
}

// Subscribe forwards the manager's events, in order and without loss (the
// manager queues them for a slow reader), until cancel; then it closes the
// channel.
func (s adapterSource) Subscribe() (<-chan pluginmanager.AdapterEvent, func()) {
	in, cancelIn := s.m.Subscribe()
	out := make(chan pluginmanager.AdapterEvent)
	done := make(chan struct{})
	go func() {
		defer close(out)
		for ev := range in {
			select {
			case out <- pluginmanager.AdapterEvent{Adapter: ev.Adapter, Kind: adapterKinds[ev.Kind], Reason: ev.Reason}:
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return out, func() {
		once.Do(func() {
			close(done)
			cancelIn()
		})
	}
}
