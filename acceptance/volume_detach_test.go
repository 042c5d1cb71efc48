package acceptance

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// The detach acceptance test, on a dev agent with the hostpath plugin as
// a task: `volume detach` is refused while the writer runs, naming it; the
// writer stopped, its teardown keeps failing (its publish directory made
// immutable, so the volume manager's os.Remove of the alloc's publish link
// fails) and backs off; once the cause is gone, `volume detach` tries it
// again at once, the plugin unpublishes and unstages, and the command
// returns when the claim and the attachment are freed — well before the
// teardown's own next try, whose time the claim shows (next_retry_at).
func TestVolumeDetachDevAgent(t *testing.T) {
	testutil.RequireRoot(t, "chattr +i makes a teardown fail")
	if _, err := exec.LookPath("chattr"); err != nil {
		testutil.Unavailable(t, "chattr (e2fsprogs) makes a teardown fail: %v", err)
	}
	a := devVolume(t, "dt1", "writer")
	node := waitNodeStatus(t, a, "ready", 10*time.Second)
	runJob(t, a, "writer", volumeUserJob("writer", "dt1", "", "echo hello > $BERTH_VOLUME_DATA/hello"))
	writer := waitVolumeUser(t, a, "writer", "dt1", node.ID, nil)

	out, err := a.cli("volume", "detach", "dt1", node.ID[:8])
	if err == nil || !strings.Contains(out, "alloc "+writer.ID) || !strings.Contains(out, "in use on the node") {
		t.Fatalf("detach while the writer runs: %v\n%s\nwant it refused naming alloc %s", err, out, writer.ID)
	}

	// The volume manager removes the alloc's publish link (os.Remove)
	// before NodeUnpublishVolume: an immutable parent directory makes that
	// fail with EPERM, even for root.
	userDir := filepath.Join(a.dir, "data", "csi", "publish", writer.ID)
	chattr := func(flag string) {
		if out, err := exec.Command("chattr", flag, userDir).CombinedOutput(); err != nil {
			t.Fatalf("chattr %s %s: %v %s", flag, userDir, err, out)
		}
	}
	chattr("+i")
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", userDir).Run() })
	stopJob(t, a, "writer")
	// Tries 1s, 2s, 4s apart: after the fourth the next is ~8s away
	// (jittered ±20%), as the claim's next_retry_at says.
	var nextRetry time.Time
	eventually(t, 60*time.Second, "the writer's teardown failed four times", func() error {
		var v struct {
			Claims []struct {
				State       string          `json:"state"`
				Attempts    int             `json:"attempts"`
				LastError   json.RawMessage `json:"last_error"`
				NextRetryAt *time.Time      `json:"next_retry_at"`
			} `json:"claims"`
		}
		if err := a.getJSON("/v1/volume/csi/dt1", &v); err != nil {
			return err
		}
		if len(v.Claims) != 1 || v.Claims[0].State != "releasing" || v.Claims[0].Attempts < 4 || v.Claims[0].NextRetryAt == nil {
			return fmt.Errorf("claims %+v, want one releasing after 4 failed tries, with its next try's time", v.Claims)
		}
		// Seen with little time left before the next try (a slow poll),
		// wait for a later one, so that the detach has seconds of room
		// on any machine and the check below measures the kick.
		if left := time.Until(*v.Claims[0].NextRetryAt); left < 4*time.Second {
			return fmt.Errorf("the next try is %s away: waiting for a later one", left)
		}
		nextRetry = *v.Claims[0].NextRetryAt
		return nil
	})
	chattr("-i")

	start := time.Now()
	out, err = a.cli("volume", "detach", "dt1", node.ID[:8])
	took := time.Since(start)
	if err != nil || !strings.Contains(out, "unpublished for alloc "+writer.ID[:8]) || !strings.Contains(out, "unstaged") ||
		!strings.Contains(out, `Claims of volume "dt1" on node `+node.ID[:8]+" freed") {
		t.Fatalf("detach once the writer stopped: %v\n%s", err, out)
	}
	// Freed by the detach's kick, not by the teardown's own next try: the
	// command returned (the claim freed) before that try was due, which
	// was at least 4 s away when the detach began.
	freed := time.Now()
	if margin := nextRetry.Sub(freed); margin <= 0 {
		t.Fatalf("claim freed at %s, only %s before the teardown's own next try (%s): want it freed by the detach's try, well before",
			freed.Format(time.RFC3339Nano), margin, nextRetry.Format(time.RFC3339Nano))
	}
	t.Logf("volume detach (CLI call → claim freed): %s; %s before the teardown's own next try",
		took.Round(time.Millisecond), nextRetry.Sub(freed).Round(time.Millisecond))
	v, err := a.volume("dt1")
	if err != nil || len(v.Claims) != 0 || len(v.Attachments) != 0 {
		t.Fatalf("after the detach: %+v (%v), want no claim and no attachment", v, err)
	}
	noMountsUnder(t, a.name+"'s CSI directory", filepath.Join(a.dir, "data", "csi"))
	if _, err := os.Lstat(filepath.Join(userDir, "dt1")); !os.IsNotExist(err) {
		t.Fatalf("the writer's publish path is still there (%v)", err)
	}
}
