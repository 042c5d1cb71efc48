package hclsrc

import (
	"testing"

	"github.com/zclconf/go-cty/cty"
)

func TestNumberText(t *testing.T) {
	for in, want := range map[string]string{
		"1.5":                  "1.5",
		"-7":                   "-7",
		"9223372036854775808":  "9223372036854775808",
		"1e20":                 "100000000000000000000",
		"1e9999999":            "1e+9999999 or so",
		"-2.5e9999999":         "-1e+9999999 or so",
		"1e-9999999":           "1e-9999999 or so",
		"0":                    "0",
		"0.000000000000000001": "1e-18",
	} {
		v, err := cty.ParseNumberVal(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := NumberText(v.AsBigFloat()); got != want {
			t.Errorf("NumberText(%s) = %q, want %q", in, got, want)
		}
	}
}
