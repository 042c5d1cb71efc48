package pluginmanager

import (
	"google.golang.org/grpc"

	"berth.dev/berth/csi/adapters"
)

// AdapterSource is what the manager needs of the storage adapters (the
// static catalog): their names, a connection to each, its current health
// and the events that change it. Adapters(m) is the one for a
// adapters.Manager; tests give a fake.
type AdapterSource interface {
	// Names lists the adapters; each is one plugin whose ID is its name.
	Names() []string
	// Conn returns a connection to the adapter's CSI services that follows
	// its restarts.
	Conn(name string) (grpc.ClientConnInterface, error)
	// State returns the adapter's current condition.
	State(name string) (adapters.State, error)
	// Subscribe returns every event from now on, in order, until cancel.
	Subscribe() (events <-chan adapters.Event, cancel func())
}

// Adapters returns the AdapterSource of a storage adapter manager.
func Adapters(m *adapters.Manager) AdapterSource { return managerSource{m} }

type managerSource struct{ m *adapters.Manager }

var _ AdapterSource = managerSource{}

func (s managerSource) Names() []string { return s.m.Names() }

func (s managerSource) Conn(name string) (grpc.ClientConnInterface, error) {
	h, err := s.m.Adapter(name)
	if err != nil {
		return nil, err
	}
	return h.Conn(), nil
}

func (s managerSource) State(name string) (adapters.State, error) {
	h, err := s.m.Adapter(name)
	if err != nil {
		return adapters.State{}, err
	}
	return h.State(), nil
}

func (s managerSource) Subscribe() (<-chan adapters.Event, func()) { return s.m.Subscribe() }
