package units

import (
	"math"
	"testing"
)

func TestBytes(t *testing.T) {
	for in, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1 << 20: "1.0 MiB",
		10 << 30: "10.0 GiB", 1 << 40: "1.0 TiB", 1 << 60: "1.0 EiB", math.MaxUint64: "16.0 EiB",
	} {
		if got := Bytes(in); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", in, got, want)
		}
	}
}
