package drivertest

import (
	"strings"
	"testing"

	"berth.dev/berth/sdk/driverpb"
)

func TestParseMountinfo(t *testing.T) {
	const info = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:5 / /vol ro,nosuid master:7 - tmpfs tmpfs rw
31 22 0:6 / /both rw shared:9 master:3 - tmpfs tmpfs rw
32 22 0:7 / /priv rw - tmpfs tmpfs rw
short line
`
	got, err := parseMountinfo(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ProcMount{
		"/":     {false, driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL},
		"/vol":  {true, driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK},
		"/both": {false, driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL},
		"/priv": {false, driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %+v, want %+v", k, got[k], w)
		}
	}
	if m, err := ProcMounts("self"); err != nil || len(m) == 0 {
		t.Errorf("ProcMounts(self): %v, %v", m, err)
	}
}
