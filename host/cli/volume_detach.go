package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// defaultDetachTimeout bounds `volume detach`'s wait for the claims to be
// freed: a controller unpublish retried with backoff.
const defaultDetachTimeout = 5 * time.Minute

func volumeDetachCommand() *cli.Command {
	return &cli.Command{
		Name:      "detach",
		Usage:     "take a volume off a node whose allocs no longer use it, then wait until its claims there are freed",
		ArgsUsage: "VOLUME NODE",
		Description: "The node unpublishes and unstages what is left of the volume (a teardown that keeps failing is\n" +
			"tried again at once, usage left after a client crash is taken down), the volume's claims there are\n" +
			"recorded node-detached, then the servers' controller unpublish frees them. Refused while an alloc on\n" +
			"the node that is not stopped, or an operator's claim not released, uses the volume. VOLUME and NODE\n" +
			"are IDs or unique prefixes. A use the node could not take down is shown with its error; its claim\n" +
			"stays releasing and the node's teardown goes on in the background, retried. After -timeout the\n" +
			"command stops waiting for the claims and says where they are stuck; the servers go on.\n\n" +
			"Exit codes: 0 the claims on the node are freed; 1 the detach was refused or failed (nothing was\n" +
			"detached, or the agent could not be reached); 2 usage; 3 the node detached the volume but its\n" +
			"claims there were not freed within -timeout (or the wait for them failed). With -json the node's\n" +
			"answer and the claims as last seen are printed in every case but 1 and 2.",
		Flags: readFlags(
			&cli.DurationFlag{Name: "timeout", Value: defaultDetachTimeout,
				Usage: "how long to wait for the claims on the node to be freed (0: no limit)"},
		),
		Action: volumeDetach,
	}
}

func volumeDetach(c *cli.Context) error {
	if c.NArg() != 2 {
		return usageError(c, "volume detach takes a volume ID and a node ID")
	}
	timeout := c.Duration("timeout")
	if timeout < 0 {
		return usageError(c, "-timeout=%s: want a duration of 0 (no limit) or more", timeout)
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	volumeID, err := findVolume(c, client, c.Args().Get(0))
	if err != nil {
		return err
	}
	nodeID, err := findID(c.Context, "node", c.Args().Get(1), client.Nodes, (*pb.Node).GetId)
	if err != nil {
		return err
	}
	resp, err := client.Volumes().Detach(c.Context, volumeID, nodeID)
	if err != nil {
		return err // refused, or not detached: exit 1
	}
	out := c.App.Writer
	if !c.Bool("json") {
		fmt.Fprintf(out, "==> Volume %q detached on node %s%s\n", volumeID, shortID(nodeID), describeNodeDetach(resp.GetNode()))
		for _, r := range resp.GetNode().GetResults() {
			if r.GetOutcome() == pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_FAILED {
				fmt.Fprintf(out, "    Teardown of %s failed (its claim stays releasing; the node retries): %s\n", detachUser(r.GetUser()), r.GetError())
			}
		}
	}
	claims, waitErr := waitDetachFreed(c, client, volumeID, nodeID, resp.GetMeta().GetIndex(), timeout)
	if c.Bool("json") {
		resp.Claims, resp.Meta = claims, nil
		if err := printJSON(out, resp); err != nil {
			return err
		}
	}
	if waitErr != nil {
		// The node detached: the write happened, the wait did not end well.
		return exitWith(exitPlacementFailed, waitErr)
	}
	if c.Bool("json") {
		return nil
	}
	_, err = fmt.Fprintf(out, "==> Claims of volume %q on node %s freed\n", volumeID, shortID(nodeID))
	return err
}

func detachUser(u *pb.CSINodeDetachUser) string {
	if u.GetAllocId() == "" {
		return "operator claim " + shortID(u.GetClaimId())
	}
	return "alloc " + shortID(u.GetAllocId())
}

// describeNodeDetach says what the node did: the uses it unpublished and
// whether it unstaged.
func describeNodeDetach(n *pb.CSINodeDetachResponse) string {
	var did []string
	var users []string
	for _, a := range n.GetAllocIds() {
		users = append(users, "alloc "+shortID(a))
	}
	for _, cl := range n.GetClaimIds() {
		users = append(users, "operator claim "+shortID(cl))
	}
	if len(users) > 0 {
		did = append(did, "unpublished for "+strings.Join(users, ", "))
	}
	if n.GetUnstaged() {
		did = append(did, "unstaged")
	}
	if len(did) == 0 {
		return " (nothing of it was left there)"
	}
	return ": " + strings.Join(did, "; ")
}

// waitDetachFreed follows the volume with blocking reads until it has no
// claim and no attachment on the node. A failed controller unpublish is
// printed as it is tried; after timeout (0: none) the wait ends with an
// error saying where it is stuck, and the claims on the node as last seen.
func waitDetachFreed(c *cli.Context, client *api.Client, volumeID, nodeID string, index uint64, timeout time.Duration) ([]*pb.Claim, error) {
	ctx := c.Context
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
		var cancel context.CancelFunc
		// The connection is cut 2 s after the deadline: the agent answers
		// a blocking read by then, so the report is of its last answer.
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(2*time.Second))
		defer cancel()
	}
	var shown int32
	read := false // the first read does not block, so a stuck report always has a view
	var last []*pb.Claim
	var lastAtt *pb.Attachment
	stuck := func() error {
		var where []string
		for _, cl := range last {
			where = append(where, fmt.Sprintf("claim %s of %s is %s", cl.GetId(), claimant(cl, func(s string) string { return s }), pb.EnumWord(cl.GetState())))
		}
		if lastAtt != nil {
			w := fmt.Sprintf("attachment is %s", pb.EnumWord(lastAtt.GetState()))
			if e := lastAtt.GetLastError(); e != nil {
				w += fmt.Sprintf(" (attempt %d: %s)", lastAtt.GetAttempts(), e.GetMessage())
			}
			where = append(where, w)
		}
		return fmt.Errorf("volume %q on node %s: not freed after %s: %s; the servers go on (follow with `berth volume status %s`)",
			volumeID, nodeID, timeout, strings.Join(where, "; "), volumeID)
	}
	for {
		q := &api.QueryOptions{WaitIndex: index}
		if !read {
			q.WaitIndex = 0
		} else if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return last, stuck()
			}
			q.WaitTime = left
		}
		view, meta, err := client.Volumes().Info(ctx, volumeID, q)
		read = read || err == nil
		if api.IsNotFound(err) {
			return nil, nil // deregistered meanwhile: nothing of it is left
		}
		if err != nil && ctx.Err() != nil && c.Context.Err() == nil {
			return last, stuck()
		}
		if err != nil {
			return last, fmt.Errorf("waiting for the claims of volume %q on node %s: %w", volumeID, nodeID, err)
		}
		index = max(meta.LastIndex, index)
		last, lastAtt = nil, nil
		for _, cl := range view.GetClaims() {
			if cl.GetNodeId() == nodeID {
				last = append(last, cl)
			}
		}
		for _, a := range view.GetAttachments() {
			if a.GetNodeId() == nodeID {
				lastAtt = a
			}
		}
		if len(last) == 0 && lastAtt == nil {
			return nil, nil
		}
		if a := lastAtt; a.GetLastError() != nil && a.GetAttempts() > shown && !c.Bool("json") {
			shown = a.GetAttempts()
			fmt.Fprintf(c.App.Writer, "    Controller unpublish from node %s failed (attempt %d, %s): %s\n",
				shortID(nodeID), a.GetAttempts(), pb.EnumWord(a.GetLastError().GetClass()), a.GetLastError().GetMessage())
		}
	}
}
