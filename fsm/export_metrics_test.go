package fsm

import "berth.dev/berth/rpc/pb"

// PutRowsUnchecked stores claims, attachments and allocs as they are at
// index, without the apply's checks: a large state for the metrics'
// benchmark, built without planning it.
func (s *StateStore) PutRowsUnchecked(index uint64, claims []*pb.Claim, atts []*pb.Attachment, allocs []*pb.Allocation) error {
	tx := s.beginWrite()
	defer tx.abort()
	tx.index = index
	for _, c := range claims {
		if err := claimsTable.insert(tx, c); err != nil {
			return err
		}
	}
	for _, a := range atts {
		if err := attachmentsTable.insert(tx, a); err != nil {
			return err
		}
	}
	for _, a := range allocs {
		if err := allocsTable.insert(tx, a); err != nil {
			return err
		}
	}
	return tx.commit()
}
