package fsm

import "errors"

// ErrDuplicateKey is returned in an ApplyResult when a command would store
// a row whose key in a unique secondary index another row already has.
// Apply functions refuse such commands themselves, naming what conflicts;
// this is the store's own guard, checked before anything is written.
var ErrDuplicateKey = errors.New("duplicate key in a unique index")
