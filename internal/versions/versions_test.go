package versions

import "testing"

func TestConstraint(t *testing.T) {
	for _, tc := range []struct {
		constraint string
		yes, no    []string
	}{
		{">= 1.2, < 2", []string{"1.2", "1.2.0", "1.10.3", "1.99"}, []string{"1.1.9", "2", "2.0.0", "0.9", "banana"}},
		{"= 1.4.0", []string{"1.4", "1.4.0", "v1.4.0", "1.4.0+build7"}, []string{"1.4.1", "1.4.0-rc1"}},
		{"1.4", []string{"1.4.0"}, []string{"1.5"}},
		{"== 1.2.0", []string{"1.2", "v1.2.0"}, []string{"1.2.1"}},
		{"!= 3", []string{"3.0.1", "2"}, []string{"3.0.0"}},
		{"> 1.0.0-beta.2", []string{"1.0.0-beta.11", "1.0.0-rc1", "1.0.0"}, []string{"1.0.0-beta.2", "1.0.0-beta.1", "1.0.0-alpha"}},
		{"<= 0.9", []string{"0.9", "0.8.7", "0.9.0-dev"}, []string{"0.9.1", "1"}},
		{"~> 1.2", []string{"1.2", "1.2.5", "1.9"}, []string{"1.1", "2.0", "2.1"}},
		{"~> 1.2.3", []string{"1.2.3", "1.2.10"}, []string{"1.2.2", "1.3.0"}},
		{" >=5.10 ,<6 ", []string{"5.10.1-generic", "5.15"}, []string{"5.9", "6.1", "5.10.0-rc1"}},
	} {
		c, err := ParseConstraint(tc.constraint)
		if err != nil {
			t.Errorf("ParseConstraint(%q): %v", tc.constraint, err)
			continue
		}
		for _, v := range tc.yes {
			if !c.Check(v) {
				t.Errorf("%q does not accept %q", tc.constraint, v)
			}
		}
		for _, v := range tc.no {
			if c.Check(v) {
				t.Errorf("%q accepts %q", tc.constraint, v)
			}
		}
	}
}

func TestConstraintRefusesGarbage(t *testing.T) {
	for _, s := range []string{"", ">=", ">= 1.2,", "1..2", "1.x", ">> 1", "=> 1", "1.2-", "-1"} {
		if _, err := ParseConstraint(s); err == nil {
			t.Errorf("ParseConstraint(%q) accepted it", s)
		}
	}
}
