package volumehooks

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

var (
	// ErrDetachInUse is returned by Detach while a live alloc on the node
	// (one the client runs, not terminal) uses the volume.
	ErrDetachInUse = errcode.New(codes.FailedPrecondition, "a live alloc on the node uses the volume")
	// ErrDetachPluginGone is returned by Detach when the volume's node
	// plugin is not running (healthy) on the node: nothing could unpublish
	// or unstage it.
	ErrDetachPluginGone = errcode.New(codes.FailedPrecondition, "the volume's csi node plugin is not running on the node")
)

// errDetachUnfinished is returned by Detach when a teardown ended without
// taking its use down: the client is shutting down.
var errDetachUnfinished = errcode.New(codes.Unavailable, "the client stopped before the teardown finished")

// DetachRequest asks Detach to take a volume off the node.
type DetachRequest struct {
	VolumeID string
	// Users are the users the servers checked (their claims on the node
	// releasing): only their uses are torn down.
	Users []DetachUser
	// Live says whether the client still runs the alloc (its tasks not all
	// dead for good); a use of such an alloc refuses the detach.
	Live func(allocID string) bool
	// NodePlugin reports whether the plugin's node instance runs here
	// (nil error) or why not; it is asked without waiting.
	NodePlugin func(pluginID string) error
}

// DetachUser is a user of the volume on the node: an alloc, or an
// operator's claim (AllocID empty; its use is keyed by ClaimID).
type DetachUser struct {
	ClaimID, AllocID string
}

func (u DetachUser) operator() bool { return u.AllocID == "" }

// key is the user of the node's use (volumemanager.Use.User).
func (u DetachUser) key() string {
	if u.operator() {
		return u.ClaimID
	}
	return u.AllocID
}

func (u DetachUser) String() string {
	if u.operator() {
		return "operator claim " + u.ClaimID
	}
	return "alloc " + u.AllocID
}

// DetachOutcome is what Detach did for one user.
type DetachOutcome int

const (
	// DetachDone: the user's use was torn down.
	DetachDone DetachOutcome = iota + 1
	// DetachNotHeld: the node holds no use of the user and no publish of
	// it is under way.
	DetachNotHeld
	// DetachFailed: the teardown failed or is still under way (Err); it
	// goes on in the background.
	DetachFailed
)

// DetachUserResult is Detach's answer for one user of the request.
type DetachUserResult struct {
	User    DetachUser
	Outcome DetachOutcome
	Err     error
}

// DetachResult is what Detach did.
type DetachResult struct {
	// PluginID is the volume's node plugin here ("" when the node held
	// nothing of the volume).
	PluginID string
	// Allocs and Claims are the users (allocs, operators' claims) whose
	// use the node unpublished.
	Allocs, Claims []string
	// Unstaged: the volume was staged here and is no longer.
	Unstaged bool
	// Users has one result per user of the request, in its order.
	Users []DetachUserResult
}

// usager is the optional ability of Volumes to show a volume's record
// (*volumemanager.Manager has it).
type usager interface {
	Usage(volumeID string) (*pb.VolumeUsageRecord, bool)
}

// Detach takes a volume off the node (`berth volume detach`) for the users
// the servers checked (req.Users), and for them only: a use of another
// user (an operator's claim made after the servers' check, an alloc they
// did not list) is left as it is. Each listed user's use is torn down
// through the teardown an alloc's Postrun runs (NodeUnpublishVolume,
// NodeUnstageVolume when it was the last, usage records kept as it keeps
// them, the node-detached report queued); a teardown already under way —
// one that keeps failing, say — is joined and tried again now rather than
// after its backoff, and its next try's outcome (not the one under way) is
// the answer; an operator's claim's publish under way is stopped and torn
// down too. A volume left staged with no user and no publish under way is
// unstaged. It waits for the teardowns until ctx ends and answers per user
// (DetachResult.Users): done, not held here, or failed (the teardown goes
// on in the background, retried, as it would have). It is refused with
// ErrDetachInUse while a listed alloc is live here, and with
// ErrDetachPluginGone when the node plugin is not running here.
func (v *VolumeHooks) Detach(ctx context.Context, req DetachRequest) (DetachResult, error) {
	volumeID := req.VolumeID
	where := fmt.Sprintf("detaching volume %q from node %s", volumeID, v.cfg.NodeID)
	held := map[string]volumemanager.Use{}
	remaining := 0
	for _, u := range v.cfg.Volumes.Uses() {
		if u.VolumeID == volumeID {
			held[useKey(u.User, u.Operator)] = u
			remaining++
		}
	}
	var live []string
	for _, u := range req.Users {
		if !u.operator() && req.Live(u.AllocID) {
			live = append(live, u.AllocID)
		}
	}
	if len(live) > 0 {
		return DetachResult{}, fmt.Errorf("%s: %w: alloc %s", where, ErrDetachInUse, strings.Join(live, ", alloc "))
	}
	res := DetachResult{Users: make([]DetachUserResult, len(req.Users))}
	var todo []int
	pluginID := ""
	for i, u := range req.Users {
		res.Users[i].User = u
		use, ok := held[useKey(u.key(), u.operator())]
		if ok && pluginID == "" {
			pluginID = use.PluginID
		}
		if ok || v.underWay(u.key(), volumeID) {
			todo = append(todo, i)
			continue
		}
		res.Users[i].Outcome = DetachNotHeld
	}
	staged := false
	if us, ok := v.cfg.Volumes.(usager); ok {
		if rec, ok := us.Usage(volumeID); ok {
			pluginID = rec.GetPluginId()
			staged = rec.GetStageState() != pb.VolumeStageState_VOLUME_STAGE_STATE_UNSPECIFIED
		}
	}
	res.PluginID = pluginID
	if pluginID != "" && req.NodePlugin != nil && (len(todo) > 0 || staged) {
		if err := req.NodePlugin(pluginID); err != nil {
			return res, fmt.Errorf("%s: csi plugin %q: %w: %w", where, pluginID, ErrDetachPluginGone, err)
		}
	}
	// Every teardown is started and kicked before any is waited for: one
	// slow teardown does not hold back the others' tries.
	tds := make([]*teardown, len(todo))
	targets := make([]int, len(todo))
	for j, i := range todo {
		u := req.Users[i]
		v.logger.Info("detaching a volume: tearing down a use", "volume_id", volumeID, "user", u.key(), "operator", u.operator())
		tds[j] = v.teardownOf(u.key(), u.operator(), volumeID, nil)
		targets[j] = tds[j].kickNext()
	}
	for j, i := range todo {
		u := req.Users[i]
		if err := tds[j].awaitTry(ctx, targets[j]); err != nil {
			res.Users[i].Outcome, res.Users[i].Err = DetachFailed, fmt.Errorf("%s: teardown of %s: %w", where, u, err)
			continue
		}
		// A teardown that ended with the client shutting down left its use.
		if v.holds(u.key(), u.operator(), volumeID) {
			res.Users[i].Outcome, res.Users[i].Err = DetachFailed, fmt.Errorf("%s: teardown of %s: %w", where, u, errDetachUnfinished)
			continue
		}
		res.Users[i].Outcome = DetachDone
		if u.operator() {
			res.Claims = append(res.Claims, u.ClaimID)
		} else {
			res.Allocs = append(res.Allocs, u.AllocID)
		}
	}
	if len(todo) == 0 && remaining == 0 && staged && !v.publishing(volumeID) {
		// Staged with no user: a teardown stopped between its last
		// unpublish and the unstage.
		actx, cancel := context.WithTimeout(ctx, v.cfg.TeardownAttempt)
		err := v.cfg.Volumes.Unpublish(actx, "", volumeID, nil)
		cancel()
		if err != nil {
			return res, fmt.Errorf("%s: unstaging: %w", where, err)
		}
	}
	if us, ok := v.cfg.Volumes.(usager); ok && staged {
		_, still := us.Usage(volumeID)
		res.Unstaged = !still
	}
	slices.Sort(res.Allocs)
	slices.Sort(res.Claims)
	return res, nil
}

func useKey(user string, operator bool) string {
	if operator {
		return "operator/" + user
	}
	return "alloc/" + user
}

// holds reports whether the node holds user's use of volumeID.
func (v *VolumeHooks) holds(user string, operator bool, volumeID string) bool {
	return slices.ContainsFunc(v.cfg.Volumes.Uses(), func(u volumemanager.Use) bool {
		return u.VolumeID == volumeID && u.User == user && u.Operator == operator
	})
}

// underWay reports whether a publish or a teardown of user's use of
// volumeID is under way: the use may not be recorded yet, or any more,
// while the plugin holds it.
func (v *VolumeHooks) underWay(user, volumeID string) bool {
	key := userVolumeKey(user, volumeID)
	v.mu.Lock()
	defer v.mu.Unlock()
	_, p := v.publishes[key]
	_, t := v.teardowns[key]
	return p || t
}

// publishing reports whether a publish of volumeID is under way.
func (v *VolumeHooks) publishing(volumeID string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, p := range v.publishes {
		if p.volumeID == volumeID {
			return true
		}
	}
	return false
}

// kickNext asks the teardown for a try now (the wait before it cut short,
// or none after the try under way) and returns that try's number for
// awaitTry.
func (td *teardown) kickNext() int {
	td.mu.Lock()
	target := td.started + 1
	td.want = max(td.want, target)
	td.mu.Unlock()
	select {
	case td.kick <- struct{}{}:
	default:
	}
	return target
}

// awaitTry waits for the teardown to end, or for try number target (or a
// later one) to fail, or for ctx. A try under way when the detach kicked
// is not its answer: it began before the detach asked.
func (td *teardown) awaitTry(ctx context.Context, target int) error {
	for {
		td.mu.Lock()
		ended, err, tried := td.ended, td.err, td.tried
		td.mu.Unlock()
		if ended >= target && err != nil {
			return err
		}
		select {
		case <-td.done:
			return nil
		case <-tried:
		case <-ctx.Done():
			return fmt.Errorf("still under way, going on in the background: %w", ctx.Err())
		}
	}
}
