package fsm

// CheckedStore is the store c was read into, for tests that check a
// Restore swapped it in.
func CheckedStore(c *CheckedSnapshot) *StateStore { return c.store }
