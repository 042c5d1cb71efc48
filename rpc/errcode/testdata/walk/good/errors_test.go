package good

import "errors"

// ErrInTest is in a test file, which the walk skips.
var ErrInTest = errors.New("test")
