package evals

// requeue hands an outstanding evaluation back untouched, to be handed out
// again at once: its worker stopped (its leadership's context ended)
// before it could plan it. Unlike nack it counts no delivery and waits no
// backoff; a wake meanwhile needs no second run, since it is planned from
// a fresh state. A token the broker no longer knows (it was reset by the
// leadership change) is ignored: the evaluation is then the next
// leadership's, rebuilt from the state.
func (b *Broker) requeue(evalID, token string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u, err := b.outstandingLocked(evalID, token)
	if err != nil {
		return
	}
	delete(b.unacked, evalID)
	delete(b.wakeAgain, evalID)
	if b.nacks[evalID] > 0 {
		b.nacks[evalID]--
	}
	job := u.eval.GetJobId()
	delete(b.inFlight, job)
	// It goes before the job's waiting evaluations, as it was handed out
	// before them.
	rest := b.waiting[job]
	delete(b.waiting, job)
	b.readyLocked(u.eval)
	if len(rest) > 0 {
		b.waiting[job] = append(b.waiting[job], rest...)
	}
}

// holdsIdle reports whether the broker holds evalID and no worker has it:
// ready, parked behind its job, or in a nack's backoff. A wake of it
// changes nothing (it is planned from a fresh state when handed out), so
// the feed skips such evaluations before reading or copying anything.
func (b *Broker) holdsIdle(evalID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[evalID] && b.unacked[evalID] == nil
}
