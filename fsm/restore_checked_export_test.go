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
