package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// volumeClaimCommands are `berth volume claim` and `berth volume release`,
// the operator's claims (DESIGN "Operator claims"), for the volume
// command group.
func volumeClaimCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name:  "claim",
			Usage: "claim a volume for an operator on a node and wait until it is published there",
			Description: "The claim goes through the states an alloc's claim does: reserved, then ready once the volume's\n" +
				"controller publish to the node is done (at once when its plugin needs none), then in use once the\n" +
				"node's client staged and published it. The command waits for that, then prints the claim and the\n" +
				"host path where the volume is published. After -timeout it stops waiting, says which state the\n" +
				"claim is stuck in and how to release it; the claim is kept.",
			ArgsUsage: "VOLUME",
			Flags: readFlags(
				&cli.StringFlag{Name: "node", Usage: "node ID or unique prefix to claim the volume on (default: one whose node plugin is healthy)"},
				&cli.StringFlag{Name: "mode", Value: "write", Usage: "read or write"},
				&cli.DurationFlag{Name: "timeout", Value: defaultClaimTimeout,
					Usage: "how long to wait for the claim to be published (0: no limit); the claim is kept either way"},
			),
			Action: volumeClaim,
		},
		{
			Name:      "release",
			Usage:     "release an operator's claim: its node unpublishes the volume, then the claim is freed",
			ArgsUsage: "CLAIM",
			Description: "CLAIM is a claim's ID or a unique prefix of one; a prefix several claims share is refused,\n" +
				"naming them.",
			Flags:  []cli.Flag{addressFlag()},
			Action: volumeRelease,
		},
	}
}

func volumeClaim(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "volume claim takes exactly one volume ID")
	}
	var mode pb.ClaimMode
	switch c.String("mode") {
	case "read":
		mode = pb.ClaimMode_CLAIM_MODE_READ
	case "write":
		mode = pb.ClaimMode_CLAIM_MODE_WRITE
	default:
		return usageError(c, "-mode=%q: want read or write", c.String("mode"))
	}
	timeout := c.Duration("timeout")
	if timeout < 0 {
		return usageError(c, "-timeout=%s: want a duration of 0 (no limit) or more", timeout)
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	volumeID, nodeID := c.Args().First(), ""
	if prefix := c.String("node"); prefix != "" {
		if nodeID, err = findID(c.Context, "node", prefix, client.Nodes, (*pb.Node).GetId); err != nil {
			return err
		}
	}
	created, err := client.VolumeClaims().Create(c.Context, volumeID, nodeID, mode)
	if err != nil {
		return err
	}
	view := &pb.ClaimGetResponse{Claim: created.GetClaim(), Attachment: created.GetAttachment(), PublishPath: created.GetPublishPath()}
	claim := view.GetClaim()
	out := c.App.Writer
	if !c.Bool("json") {
		fmt.Fprintf(out, "==> Claim %s of volume %q (%s, %s) reserved on node %s\n", claim.GetId(), volumeID,
			pb.EnumWord(claim.GetMode()), pb.EnumWord(claim.GetAccessMode()), shortID(claim.GetNodeId()))
	}
	// The write's index (the claim's modify index, should an older agent
	// not send it): the first read waits for a change after it.
	index := max(created.GetMeta().GetIndex(), claim.GetModifyIndex())
	if view, err = waitClaimPublished(c, client, view, index, timeout); err != nil {
		return err
	}
	if c.Bool("json") {
		view.Meta = nil
		return printJSON(out, view)
	}
	return printClaimPublished(c, client, view)
}

// defaultClaimTimeout bounds `volume claim`'s wait: long enough for a
// controller publish retried with backoff, short enough that a claim stuck
// behind something that will not change (a plugin gone) is reported.
const defaultClaimTimeout = 5 * time.Minute

// waitClaimPublished follows the claim with blocking reads (no polling
// interval) until its node's client published it (in use), printing each
// failed try of its controller publish and of the node's stage and
// publish. A final error ends the wait with an error; the claim stays
// where it is, as the servers keep it, until it is released. With a
// timeout (0: none) the wait ends after it with an error saying where the
// claim is stuck; the claim is kept.
func waitClaimPublished(c *cli.Context, client *api.Client, view *pb.ClaimGetResponse, index uint64, timeout time.Duration) (*pb.ClaimGetResponse, error) {
	claim := view.GetClaim()
	volumeID, claimID := claim.GetVolumeId(), claim.GetId()
	ctx := c.Context
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
		// The agent is asked to answer by the deadline; the connection is
		// cut a little later, so the report is of its last answer unless
		// it does not answer at all.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(min(timeout/2, 2*time.Second)))
		defer cancel()
	}
	var shown, shownNode int32
	for view.GetClaim().GetState() < pb.ClaimState_CLAIM_STATE_IN_USE {
		if cl := view.GetClaim(); cl.GetState() == pb.ClaimState_CLAIM_STATE_READY && cl.GetLastError() != nil && cl.GetAttempts() > shownNode {
			shownNode = cl.GetAttempts()
			e := cl.GetLastError()
			if e.GetClass() == pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL {
				return nil, fmt.Errorf("volume %q: publish on node %s failed (attempt %d): %s\nclaim %s stays ready: release it with `berth volume release %s`",
					volumeID, cl.GetNodeId(), cl.GetAttempts(), e.GetMessage(), claimID, claimID)
			}
			if !c.Bool("json") {
				fmt.Fprintf(c.App.Writer, "    Publish on node %s failed (attempt %d, %s): %s\n",
					shortID(cl.GetNodeId()), cl.GetAttempts(), pb.EnumWord(e.GetClass()), e.GetMessage())
			}
		}
		if a := view.GetAttachment(); a.GetLastError() != nil && a.GetAttempts() > shown {
			shown = a.GetAttempts()
			e := a.GetLastError()
			if e.GetClass() == pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL {
				return nil, fmt.Errorf("volume %q: controller publish to node %s failed (attempt %d): %s\nclaim %s stays reserved: release it with `berth volume release %s`",
					volumeID, a.GetNodeId(), a.GetAttempts(), e.GetMessage(), claimID, claimID)
			}
			if !c.Bool("json") {
				next := ""
				if t := a.GetNextRetryAt(); t > 0 {
					next = fmt.Sprintf("; next try at %s", time.Unix(0, t).Format(time.RFC3339))
				}
				fmt.Fprintf(c.App.Writer, "    Controller publish to node %s failed (attempt %d, %s): %s%s\n",
					shortID(a.GetNodeId()), a.GetAttempts(), pb.EnumWord(e.GetClass()), e.GetMessage(), next)
			}
		}
		q := &api.QueryOptions{WaitIndex: index}
		if !deadline.IsZero() {
			// The agent answers (unchanged) by the deadline, so the wait
			// ends with an answer rather than a cut connection.
			left := time.Until(deadline)
			if left <= 0 {
				return nil, claimStuck(view, timeout)
			}
			q.WaitTime = left
		}
		got, meta, err := client.VolumeClaims().Info(ctx, volumeID, claimID, q)
		if api.IsNotFound(err) {
			return nil, fmt.Errorf("claim %s of volume %q was freed before it was published (released meanwhile?)", claimID, volumeID)
		}
		if err != nil && ctx.Err() != nil && c.Context.Err() == nil {
			return nil, claimStuck(view, timeout)
		}
		if err != nil {
			return nil, fmt.Errorf("waiting for claim %s of volume %q: %w", claimID, volumeID, err)
		}
		view, index = got, max(meta.LastIndex, index)
	}
	if s := view.GetClaim().GetState(); s >= pb.ClaimState_CLAIM_STATE_RELEASING {
		return nil, fmt.Errorf("claim %s of volume %q is %s: it was released before the command saw it published", claimID, volumeID, pb.EnumWord(s))
	}
	return view, nil
}

// claimStuck says, once the wait timed out, which state the claim is in,
// what it waits for, and how to follow or release it.
func claimStuck(view *pb.ClaimGetResponse, timeout time.Duration) error {
	claim := view.GetClaim()
	id, volumeID, node := claim.GetId(), claim.GetVolumeId(), claim.GetNodeId()
	var waits string
	switch a := view.GetAttachment(); {
	case claim.GetState() == pb.ClaimState_CLAIM_STATE_READY:
		waits = fmt.Sprintf("the client on node %s has not published it", node)
		if e := claim.GetLastError(); e != nil {
			waits += fmt.Sprintf(" (%d failed tries, the last: %s)", claim.GetAttempts(), e.GetMessage())
		} else {
			waits += " (no try has failed: is the node's client up and its node plugin healthy?)"
		}
	case a == nil:
		waits = fmt.Sprintf("the volume has no attachment to node %s yet", node)
	case a.GetState() == pb.AttachmentState_ATTACHMENT_STATE_ATTACHING:
		waits = fmt.Sprintf("its controller publish to node %s has not succeeded", node)
		if e := a.GetLastError(); e != nil {
			waits += fmt.Sprintf(" (%d failed tries, the last: %s)", a.GetAttempts(), e.GetMessage())
		} else {
			waits += " (no try has failed: is a controller of the volume's plugin running?)"
		}
	default:
		waits = fmt.Sprintf("the volume's attachment to node %s is %s", node, pb.EnumWord(a.GetState()))
	}
	return fmt.Errorf("claim %s of volume %q is still %s after %s: %s\n"+
		"the claim is kept: follow it with `berth volume status -verbose %s`, or release it with `berth volume release %s`",
		id, volumeID, pb.EnumWord(claim.GetState()), timeout, waits, volumeID, id)
}

// printClaimPublished says where the volume is: the publish path under
// the node's data_dir, which the agent asked knows only when it is that
// node's client.
func printClaimPublished(c *cli.Context, client *api.Client, view *pb.ClaimGetResponse) error {
	claim := view.GetClaim()
	nodeName := shortID(claim.GetNodeId())
	if n, _, err := client.Node(c.Context, claim.GetNodeId(), nil); err == nil && n.GetName() != "" {
		nodeName = fmt.Sprintf("%s (%s)", nodeName, n.GetName())
	}
	hostPath := fmt.Sprintf("<data_dir of the client on node %s>/%s/", shortID(claim.GetNodeId()), view.GetPublishPath())
	if self, err := client.AgentSelf(c.Context); err == nil && self.GetClient().GetNodeId() == claim.GetNodeId() && self.GetDataDir() != "" {
		hostPath = filepath.Join(self.GetDataDir(), view.GetPublishPath()) + "/"
	}
	_, err := fmt.Fprintf(c.App.Writer, "==> Volume %q is claimed and published on node %s\n"+
		"    Claim:     %s\n"+
		"    Host path: %s\n"+
		"    Release it with: berth volume release %s (the node's client unpublishes it, then the claim is freed)\n",
		claim.GetVolumeId(), nodeName, claim.GetId(), hostPath, claim.GetId())
	return err
}

func volumeRelease(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(c, "volume release takes exactly one claim ID")
	}
	client, err := apiClient(c)
	if err != nil {
		return err
	}
	// Only operators' claims can be released: an allocation's claim
	// sharing the prefix must not make it ambiguous.
	operatorClaims := func(ctx context.Context, q *api.QueryOptions) ([]*pb.Claim, *api.QueryMeta, error) {
		q.Params = map[string]string{"operator": "true"}
		return client.VolumeClaims().List(ctx, q)
	}
	claimID, err := findID(c.Context, "claim", c.Args().First(), operatorClaims, (*pb.Claim).GetId)
	var none *noMatchError
	if errors.As(err, &none) {
		return fmt.Errorf("%w (never reserved, or freed already; `berth volume claim` prints the claim ID)", err)
	}
	if err != nil {
		return err
	}
	got, _, err := client.VolumeClaims().ByID(c.Context, claimID, nil)
	if api.IsNotFound(err) {
		return fmt.Errorf("no claim %q (freed meanwhile)", claimID)
	}
	if err != nil {
		return err
	}
	claim := got.GetClaim()
	resp, err := client.VolumeClaims().Release(c.Context, claim.GetVolumeId(), claimID)
	if err != nil {
		return err
	}
	if resp.GetClaim() == nil {
		_, err = fmt.Fprintf(c.App.Writer, "==> Claim %s of volume %q on node %s is freed\n", claimID, claim.GetVolumeId(), shortID(claim.GetNodeId()))
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "==> Claim %s of volume %q on node %s is %s: it is freed once the node's client has unpublished\n"+
		"    the volume (or the node is fenced, or down past force_detach_after)\n",
		claimID, claim.GetVolumeId(), shortID(claim.GetNodeId()), pb.EnumWord(resp.GetClaim().GetState()))
	return err
}
