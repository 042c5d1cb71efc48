package fsm

// SetDeferredRestoreHooks sets what runs before a deferred restore's
// decoding starts (hook) and what its failure calls instead of ending the
// process (failed).
func SetDeferredRestoreHooks(f *FSM, hook func(), failed func(error)) {
	f.deferredHook, f.deferredFailed = hook, failed
}

// SetMaxDeferredRestore sets the largest stream a restore defers and
// returns a func putting the old bound back.
func SetMaxDeferredRestore(n int64) (restore func()) {
	old := maxDeferredRestore
	maxDeferredRestore = n
	return func() { maxDeferredRestore = old }
}
