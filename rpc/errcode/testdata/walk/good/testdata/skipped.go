package skipped

import "errors"

// ErrInTestdata is skipped.
var ErrInTestdata = errors.New("testdata")
