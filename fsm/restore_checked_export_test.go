package fsm

// CheckedStore is the store c was read into, for tests that check a
// Restore swapped it in.
func CheckedStore(c *CheckedSnapshot) *StateStore { return c.store }

// SetDecodeWorkers sets how many goroutines decode a restore's records
// (1: sequentially) and returns a function restoring the previous count.
func SetDecodeWorkers(n int) (restore func()) {
	old := decodeWorkers.Swap(int32(n))
	return func() { decodeWorkers.Store(old) }
}

// OfferBusy reports whether a Restore holds f's offer, reading its bytes.
func OfferBusy(f *FSM) bool {
	if f.offered.mu.TryLock() {
		f.offered.mu.Unlock()
		return false
	}
	return true
}
