package runhooks

import (
	"errors"
	"fmt"
	"testing"
)

// The mark survives wrapping and hides nothing: the text and the wrapped
// sentinel stay as they were.
func TestUnrecoverable(t *testing.T) {
	base := errors.New("socket path too long")
	err := fmt.Errorf("prestart hook x: %w", Unrecoverable(fmt.Errorf("plugin p: %w", base)))
	if !IsUnrecoverable(err) || !errors.Is(err, base) || err.Error() != "prestart hook x: plugin p: socket path too long" {
		t.Fatalf("%v: unrecoverable %t, is base %t", err, IsUnrecoverable(err), errors.Is(err, base))
	}
	if IsUnrecoverable(base) || IsUnrecoverable(nil) || Unrecoverable(nil) != nil {
		t.Fatal("an unmarked error (or nil) counts as unrecoverable")
	}
}
