package hclsrc

import (
	"fmt"
	"math"
	"math/big"
)

// maxPrintedExp bounds the binary exponent of a number NumberText prints
// digit for digit: 2^1024 has about 300 decimal digits.
const maxPrintedExp = 1024

// NumberText formats a number read from a file for an error message: whole
// numbers in full ("9223372036854775808"), others in the shortest form
// ("1.5"). HCL and JSON accept numbers such as 1e9999999, whose decimal form
// has millions of digits and takes seconds to compute; those are described
// by their order of magnitude instead ("1e+9999999 or so").
func NumberText(bf *big.Float) string {
	exp := bf.MantExp(nil)
	if exp >= -maxPrintedExp && exp <= maxPrintedExp {
		if bf.IsInt() {
			return bf.Text('f', 0)
		}
		return bf.Text('g', -1)
	}
	sign := ""
	if bf.Sign() < 0 {
		sign = "-"
	}
	return fmt.Sprintf("%s1e%+d or so", sign, int64(math.Round(float64(exp-1)*math.Log10(2))))
}
