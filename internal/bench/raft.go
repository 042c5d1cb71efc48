package main

import "errors"

func benchRaft(options) error { return errors.New("not built yet") }
