// Package units writes quantities for people: sizes in binary units, as
// the CLI and the web UI show them (one function, so both agree).
package units

import "fmt"

// Bytes is a size in binary units: "512 B", "1.0 MiB", "3.5 GiB".
func Bytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}
