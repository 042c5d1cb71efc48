package helper

import "errors"

// ErrHelped is a subpackage sentinel listed in sdk's table.
var ErrHelped = errors.New("helped")

// ErrForgotten is a subpackage sentinel the table does not list.
var ErrForgotten = errors.New("forgotten")
