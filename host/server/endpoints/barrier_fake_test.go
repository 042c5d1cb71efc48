package endpoints

import "context"

// Barrier: fsmServer applies every proposal at once; nothing trails.
func (s *fsmServer) Barrier(context.Context) error { return nil }
