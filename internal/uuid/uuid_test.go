package uuid

import "testing"

func TestGenerateIsValidAndUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := Generate()
		if !Valid(id) {
			t.Fatalf("Generate() = %q, not a valid UUID", id)
		}
		if id[14] != '4' {
			t.Fatalf("Generate() = %q, version nibble %q, want 4", id, id[14])
		}
		if seen[id] {
			t.Fatalf("Generate() repeated %q", id)
		}
		seen[id] = true
	}
}

func TestValidRejects(t *testing.T) {
	for _, s := range []string{"", "not-a-uuid", "0123456789abcdef0123456789abcdef0123", "0123456-89ab-cdef-0123-456789abcdef0", "0123456X-89ab-4def-8123-456789abcdef", "0123456789AB-4def-8123-456789abcdef"} {
		if Valid(s) {
			t.Errorf("Valid(%q) = true", s)
		}
	}
}
