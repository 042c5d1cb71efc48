package fsm

import (
	"fmt"
	"slices"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// TableUniqueNames is a test table of nodes keyed by ID with a unique index
// on the name, so tests outside the package can restore snapshots of a
// table with a unique secondary index (the production tables have none).
const TableUniqueNames = "test_unique_names"

var uniqueNames = newTable(TableUniqueNames, (*pb.Node).GetId)

func init() { uniqueNames.uniqueIndex("name", (*pb.Node).GetName) }

// NewWithUniqueNames returns an FSM over the production tables and
// commands plus TableUniqueNames.
func NewWithUniqueNames(logger hclog.Logger) *FSM {
	s := productionSchema()
	s.tables = append(slices.Clone(s.tables), uniqueNames)
	return newFSM(logger, s)
}

// NodeAllocIndexRows returns every row of node_alloc_index, for tests that
// print the whole state (no production reader lists them).
func (r reader) NodeAllocIndexRows() ([]*pb.TableIndex, error) {
	return nodeAllocIndexTable.list(r, nil)
}

// AttachmentsPage lists every attachment, for the tests' state dumps.
func (r reader) AttachmentsPage() ([]*pb.Attachment, error) {
	return attachmentsTable.list(r, nil)
}

// PutVolumeUnchecked stores v as it is at index, without the apply's
// checks: state a server of an older version left (a second volume ID of
// one plugin's volume, registered before the rule refused it).
func (s *StateStore) PutVolumeUnchecked(index uint64, v *pb.Volume) error {
	tx := s.beginWrite()
	defer tx.abort()
	tx.index = index
	v.CreateIndex, v.ModifyIndex = index, index
	if err := volumesTable.insert(tx, v); err != nil {
		return err
	}
	return tx.commit()
}

// SetClaimStateUnchecked rewrites a stored claim's state at index, without
// the apply's checks: a claim left live beside its terminal alloc, which
// only GC's last guard moves on.
func (s *StateStore) SetClaimStateUnchecked(index uint64, id string, state pb.ClaimState) error {
	tx := s.beginWrite()
	defer tx.abort()
	tx.index = index
	c, err := claimsTable.first(tx, nil, id)
	if err != nil || c == nil {
		return fmt.Errorf("claim %q: %v", id, err)
	}
	n := proto.Clone(c).(*pb.Claim)
	n.State, n.ModifyIndex = state, index
	if err := claimsTable.insert(tx, n); err != nil {
		return err
	}
	return tx.commit()
}

// ForceInstancesSplit decides the pluginInstancesSince gate for every FSM
// until the returned func restores the servers table's word. Tests using
// it must not run in parallel.
func ForceInstancesSplit(on bool) (restore func()) {
	forceInstancesSplit = &on
	return func() { forceInstancesSplit = nil }
}

// CSIPluginRaw returns the plugin's stored row as it is (a split row
// without its instances) and its rows of csi_plugin_instances.
func (s *StateStore) CSIPluginRaw(id string) (*pb.CSIPlugin, []*pb.CSIPluginInstance, error) {
	r := s.reader
	p, err := csiPluginsTable.first(r, nil, id)
	if err != nil {
		return nil, nil, err
	}
	insts, err := csiInstancesTable.list(r, nil, id)
	return p, insts, err
}

// CheckPluginRows holds the plugin tables to checkPluginRows: the
// invariant Restore enforces and every apply keeps.
func (s *StateStore) CheckPluginRows() error { return checkPluginRows(s.reader) }

// PutCSIPluginInstanceUnchecked stores an instance row as it is, without
// its plugin row's facts: a corrupt shape a restored upload could hold.
func (s *StateStore) PutCSIPluginInstanceUnchecked(index uint64, i *pb.CSIPluginInstance) error {
	tx := s.beginWrite()
	defer tx.abort()
	tx.index = index
	if err := csiInstancesTable.insert(tx, i); err != nil {
		return err
	}
	return tx.commit()
}

// CSIPluginAllocRows returns the plugin's rows of csi_plugin_allocs.
func (s *StateStore) CSIPluginAllocRows(id string) ([]*pb.CSIPluginAllocRow, error) {
	return csiAllocsTable.list(s.reader, nil, id)
}

// The package's tests check every replace's prev (apply_alloc_row.go).
func init() { checkReplacePrev = true }
