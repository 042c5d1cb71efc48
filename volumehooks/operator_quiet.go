package volumehooks

// holdsNoOperatorClaim reports whether the node holds no operator claim:
// no use of one, no publish or teardown under way (any teardown counts:
// the check is kept cheap and errs towards asking), and nothing in the
// operator-claim follower's own records (noneRecorded). An answer listing
// no operator claim then tells the follower nothing, and it says so to the
// servers (ClientClaimsRequest.holds_none), which hold such an answer back
// instead of waking the node for every claim change near its own.
func (v *VolumeHooks) holdsNoOperatorClaim(noneRecorded bool) bool {
	if !noneRecorded {
		return false
	}
	for _, u := range v.cfg.Volumes.Uses() {
		if u.Operator {
			return false
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.publishes) == 0 && len(v.teardowns) == 0
}
