package fsm

import (
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// ClaimStateSinceVersion is the first berth version whose servers set a
// claim's state_entered_at when its state changes.
const ClaimStateSinceVersion = "0.1.0-dev.4"

// claimStateSince is the version gate of the state_entered_at rule. Unlike a
// command's flag, the rule is decided from the replicated state: it holds
// in an apply when every server in the servers table has recorded a
// version at ClaimStateSinceVersion or later. Every server reads the same
// table at the same index, so all decide alike; an older server records
// its own version, which keeps the rule off everywhere until it is
// upgraded (it would not set the field). Once the rule holds, an older
// server joining is refused by the leader (apply_gates.go). While the
// rule is off a moved claim's state_entered_at is cleared (0), so readers
// fall back to modified_at rather than keep a stale start.
var claimStateSince = versions.MustConstraint(">= " + ClaimStateSinceVersion)

// stateSinceOn reports whether the claimStateSince rule holds in tx. The
// answer is kept on tx until the servers table is written.
func stateSinceOn(tx *writeTxn) (bool, error) {
	if tx.stateSince != 0 {
		return tx.stateSince > 0, nil
	}
	servers, err := serversTable.list(tx, nil)
	if err != nil {
		return false, err
	}
	on := len(servers) > 0
	for _, s := range servers {
		if s.GetVersion() == "" || !claimStateSince.Check(s.GetVersion()) {
			on = false
			break
		}
	}
	tx.stateSince = -1
	if on {
		tx.stateSince = 1
	}
	return on, nil
}

// markStateSince sets n.state_entered_at to at when the rule holds and n is
// entering a state other than prev's (prev nil: n is new); otherwise it
// keeps n's value, cleared when the rule is off and the state changed.
// A move with no time (at 0: a command from an older proposer that
// carried none) while the rule holds keeps prev's start (ClaimStateStart)
// and modified_at, rather than a 0 that readers would take for "since
// creation".
func markStateSince(tx *writeTxn, prev, n *pb.Claim, at int64) error {
	if prev != nil && prev.GetState() == n.GetState() {
		return nil
	}
	on, err := stateSinceOn(tx)
	if err != nil {
		return err
	}
	n.StateEnteredAt = 0
	switch {
	case on && at == 0 && prev != nil:
		n.StateEnteredAt, n.ModifiedAt = ClaimStateStart(prev), prev.GetModifiedAt()
	case on:
		n.StateEnteredAt = at
	}
	return nil
}

// claimMoveTime is the time of the claim moves of an apply whose command
// carries the server's own clock (server, 0 when its proposer was older)
// beside an older time (old: a client's clock, or 0): server while the
// claimStateSince rule holds, as every server then knows the field; old
// otherwise, as an older server, which ignores the field, would use it.
func claimMoveTime(tx *writeTxn, old, server int64) (int64, error) {
	if server == 0 {
		return old, nil
	}
	on, err := stateSinceOn(tx)
	if err != nil || !on {
		return old, err
	}
	return server, nil
}

// ClaimStateStart returns when c entered its current state, in unix
// nanoseconds: state_entered_at, or, for a claim last moved while the rule was
// off, modified_at (a failed try moves it too, so the wait it gives is
// never longer than the real one) or created_at.
func ClaimStateStart(c *pb.Claim) int64 {
	if s := c.GetStateEnteredAt(); s > 0 {
		return s
	}
	if m := c.GetModifiedAt(); m > 0 {
		return m
	}
	return c.GetCreatedAt()
}
