package main

import "errors"

// ErrOtherModule is in a nested module, which the walk skips.
var ErrOtherModule = errors.New("another module's business")

func main() {}
