package hostpath

import (
	"slices"
	"strings"
	"testing"
)

const sampleMountInfo = `22 27 0:21 / /proc rw,relatime - proc proc rw
36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
40 27 254:0 /var/lib/x/data /tmp/with\040space\011tab rw shared:5 - ext4 /dev/vda rw
41 27 254:0 /d /tmp/back\134slash rw - ext4 /dev/vda rw
`

func TestParseMountInfo(t *testing.T) {
	got, err := parseMountInfo(strings.NewReader(sampleMountInfo))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/proc", "/mnt2", "/tmp/with space\ttab", `/tmp/back\slash`}
	if !slices.Equal(got, want) {
		t.Fatalf("mount points = %q, want %q", got, want)
	}
	if _, err := parseMountInfo(strings.NewReader("36 35 98:0 /mnt1\n")); err == nil {
		t.Fatal("a truncated line was accepted")
	}
}

func FuzzParseMountInfo(f *testing.F) {
	f.Add(sampleMountInfo)
	f.Add(`1 2 3:4 / /a\040b rw - t s o`)
	f.Add(`1 2 3:4 / /a\04 rw - t s o`)
	f.Fuzz(func(t *testing.T, s string) {
		points, err := parseMountInfo(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, p := range points {
			if strings.ContainsAny(p, " \t\n") && !strings.Contains(s, `\0`) {
				t.Fatalf("mount point %q has whitespace the input did not escape", p)
			}
		}
	})
}
