package fsm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// The script commands of volumes, claims, attachments and fences:
//
//	register-volume id= plugin= [name= external= caps=(access:attach,...) min= max= capacity= expand-pending= secrets=(k:v,...) if-index= if-absent=true at=]
//	deregister-volume id= [force=true]
//	volume-deleting id= [off=true at=]
//	operator-claim id= volume= node= [mode=read|write access= attach= at=]
//	operator-release id= [at=]
//	claim-update [at=]
//	  claim id= state= [node= force=true error= class=uncertain|final attempts= retry= expanded=]
//	attachment-update volume= node= state= [controller= context=(k:v,...) error= class= attempts= retry= at=]
//	fence node= [off=true at=]
//	host-volume-register id= name= node= [path= capacity= caps=(access:attach,...) state=ready|deleting|pending put_back=true mark_index= must_exist=true at=]
//	host-volume-delete id=
//
// and the plan command's claim line (script_jobs_test.go):
//
//	claim id= alloc= volume= [mode=read|write access= attach= node= host=true]
//
// Access modes and attachment modes are the API's words; a claim's default
// is single-node-writer, file-system, mode write.

// encodeVolumeCommand returns the raft entry of one of the commands above.
func encodeVolumeCommand(t *testing.T, td *datadriven.TestData) ([]byte, bool) {
	at := argInt(t, td, "at", 0)
	switch td.Cmd {
	case "register-volume":
		id := argString(t, td, "id", "")
		v := &pb.Volume{
			Id: id, Name: argString(t, td, "name", id), PluginId: argString(t, td, "plugin", ""),
			ExternalId:                argString(t, td, "external", "ext-"+id),
			RequestedCapacityMinBytes: argInt(t, td, "min", 0), RequestedCapacityMaxBytes: argInt(t, td, "max", 0),
			CapacityBytes: argInt(t, td, "capacity", 0), NodeExpansionPendingBytes: argInt(t, td, "expand-pending", 0),
		}
		caps := []string{"single-node-writer:file-system"}
		if arg, ok := td.Arg("caps"); ok {
			caps = arg.Vals
		}
		for _, c := range caps {
			if c == "" {
				continue // caps=(): none
			}
			access, attach, _ := strings.Cut(c, ":")
			v.Capabilities = append(v.Capabilities, &pb.VolumeCapability{
				AccessMode: accessMode(t, td, access), AttachmentMode: attachmentMode(t, td, attach),
			})
		}
		if arg, ok := td.Arg("secrets"); ok {
			v.Secrets = map[string]string{}
			for _, kv := range arg.Vals {
				k, val, _ := strings.Cut(kv, ":")
				v.Secrets[k] = val
			}
		}
		return mustEncode(t, fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: v, RegisteredAt: at,
			IfModifyIndex: uint64(argInt(t, td, "if-index", 0)), IfAbsent: argBool(t, td, "if-absent"),
			// As the leader proposes it once every server knows the rule;
			// unique-external=false as while one is older.
			UniqueExternal: !td.HasArg("unique-external") || argBool(t, td, "unique-external")}), true
	case "volume-deleting":
		return mustEncode(t, fsm.VolumeDeleting, &pb.VolumeDeletingCommand{
			VolumeId: argString(t, td, "id", ""), Deleting: !argBool(t, td, "off"), UpdatedAt: at,
		}), true
	case "deregister-volume":
		return mustEncode(t, fsm.VolumeDeregister, &pb.VolumeDeregisterCommand{
			VolumeId: argString(t, td, "id", ""), Force: argBool(t, td, "force"),
		}), true
	case "operator-claim":
		c := scriptClaim(t, td)
		c.Operator = true
		return mustEncode(t, fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: c, CreatedAt: at}), true
	case "operator-release":
		return mustEncode(t, fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: argString(t, td, "id", ""), UpdatedAt: at}), true
	case "claim-update":
		cmd := &pb.ClaimUpdateCommand{UpdatedAt: at}
		for _, line := range inputLines(t, td) {
			if line.Cmd != "claim" {
				line.Fatalf(t, "claim-update: unknown line %q", line.Cmd)
			}
			cmd.Transitions = append(cmd.Transitions, &pb.ClaimTransition{
				ClaimId: argString(t, line, "id", ""), State: claimState(t, line),
				NodeId: argString(t, line, "node", ""), Force: argBool(t, line, "force"),
				Error: scriptError(t, line), Attempts: int32(argInt(t, line, "attempts", 0)), NextRetryAt: argInt(t, line, "retry", 0),
				NodeExpandedBytes: argInt(t, line, "expanded", 0),
			})
		}
		return mustEncode(t, fsm.ClaimUpdate, cmd), true
	case "attachment-update":
		cmd := &pb.AttachmentUpdateCommand{
			VolumeId: argString(t, td, "volume", ""), NodeId: argString(t, td, "node", ""),
			State:            pb.AttachmentState(argEnum(t, td, "state", "ATTACHMENT_STATE_", pb.AttachmentState_value, 0)),
			ControllerNodeId: argString(t, td, "controller", ""), Error: scriptError(t, td),
			Attempts: int32(argInt(t, td, "attempts", 0)), NextRetryAt: argInt(t, td, "retry", 0), UpdatedAt: at,
			CsiNodeId: argString(t, td, "csi", ""),
		}
		if arg, ok := td.Arg("context"); ok {
			cmd.PublishContext = map[string]string{}
			for _, kv := range arg.Vals {
				k, v, _ := strings.Cut(kv, ":")
				cmd.PublishContext[k] = v
			}
		}
		return mustEncode(t, fsm.AttachmentUpdate, cmd), true
	case "host-volume-register":
		v := &pb.HostVolume{Id: argString(t, td, "id", ""), Name: argString(t, td, "name", ""), NodeId: argString(t, td, "node", ""),
			HostPath: argString(t, td, "path", ""), CapacityBytes: argInt(t, td, "capacity", 0), CreatedAt: at, ModifiedAt: at,
			State: pb.HostVolumeState(argEnum(t, td, "state", "HOST_VOLUME_STATE_", pb.HostVolumeState_value, int32(pb.HostVolumeState_HOST_VOLUME_STATE_READY)))}
		caps := []string{"single-node-writer:file-system"}
		if arg, ok := td.Arg("caps"); ok {
			caps = arg.Vals
		}
		for _, c := range caps {
			access, attach, _ := strings.Cut(c, ":")
			v.Capabilities = append(v.Capabilities, &pb.VolumeCapability{
				AccessMode: accessMode(t, td, access), AttachmentMode: attachmentMode(t, td, attach),
			})
		}
		return mustEncode(t, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: v, PutBack: argBool(t, td, "put_back"),
			MarkIndex: uint64(argInt(t, td, "mark_index", 0)), MustExist: argBool(t, td, "must_exist")}), true
	case "host-volume-delete":
		return mustEncode(t, fsm.HostVolumeDelete, &pb.HostVolumeDeleteCommand{Id: argString(t, td, "id", "")}), true
	case "fence":
		return mustEncode(t, fsm.NodeFence, &pb.NodeFenceCommand{
			NodeId: argString(t, td, "node", ""), Fenced: !argBool(t, td, "off"), UpdatedAt: at,
		}), true
	}
	return nil, false
}

// scriptClaim is a claim from a line's id= alloc= volume= node= mode=
// access= attach=.
func scriptClaim(t *testing.T, td *datadriven.TestData) *pb.Claim {
	c := &pb.Claim{
		Id: argString(t, td, "id", ""), VolumeId: argString(t, td, "volume", ""),
		AllocId: argString(t, td, "alloc", ""), NodeId: argString(t, td, "node", ""),
		Mode:           pb.ClaimMode(argEnum(t, td, "mode", "CLAIM_MODE_", pb.ClaimMode_value, int32(pb.ClaimMode_CLAIM_MODE_WRITE))),
		AccessMode:     accessMode(t, td, argString(t, td, "access", "single-node-writer")),
		AttachmentMode: attachmentMode(t, td, argString(t, td, "attach", "file-system")),
	}
	if argBool(t, td, "host") {
		c.Request = &pb.VolumeRequest{Type: "host", Source: c.GetVolumeId()}
	}
	return c
}

func scriptError(t *testing.T, td *datadriven.TestData) *pb.VolumeError {
	if !td.HasArg("error") {
		return nil
	}
	return &pb.VolumeError{
		Message: argString(t, td, "error", ""),
		Class:   pb.VolumeErrorClass(argEnum(t, td, "class", "VOLUME_ERROR_CLASS_", pb.VolumeErrorClass_value, int32(pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN))),
	}
}

func claimState(t *testing.T, td *datadriven.TestData) pb.ClaimState {
	return pb.ClaimState(argEnum(t, td, "state", "CLAIM_STATE_", pb.ClaimState_value, 0))
}

func accessMode(t *testing.T, td *datadriven.TestData, word string) pb.VolumeAccessMode {
	v, ok := pb.VolumeAccessMode_value["VOLUME_ACCESS_MODE_"+strings.ToUpper(strings.ReplaceAll(word, "-", "_"))]
	if !ok {
		td.Fatalf(t, "access mode %q: not a mode word", word)
	}
	return pb.VolumeAccessMode(v)
}

func attachmentMode(t *testing.T, td *datadriven.TestData, word string) pb.VolumeAttachmentMode {
	v, ok := pb.VolumeAttachmentMode_value["VOLUME_ATTACHMENT_MODE_"+strings.ToUpper(strings.ReplaceAll(word, "-", "_"))]
	if !ok {
		td.Fatalf(t, "attachment mode %q: not a mode word", word)
	}
	return pb.VolumeAttachmentMode(v)
}

// dumpVolumes prints volumes, claims and attachments, a line each.
func dumpVolumes(b *strings.Builder, st stateReader) error {
	vols, _, err := st.VolumesPage(nil, "", 0, nil)
	if err != nil {
		return err
	}
	for _, v := range vols {
		var caps []string
		for _, c := range v.GetCapabilities() {
			caps = append(caps, pb.EnumWord(c.GetAccessMode())+":"+pb.EnumWord(c.GetAttachmentMode()))
		}
		fmt.Fprintf(b, "volume %s: plugin=%s external=%s caps=%s provider=%q schedulable=%t controller-required=%t",
			v.GetId(), v.GetPluginId(), v.GetExternalId(), strings.Join(caps, ","), v.GetProvider(), v.GetSchedulable(), v.GetControllerRequired())
		if n := len(v.GetSecrets()); n > 0 {
			fmt.Fprintf(b, " secrets=%d", n)
		}
		if v.GetDeleting() {
			b.WriteString(" deleting")
		}
		if v.GetCapacityBytes() != 0 || v.GetNodeExpansionPendingBytes() != 0 {
			fmt.Fprintf(b, " capacity=%d", v.GetCapacityBytes())
		}
		if p := v.GetNodeExpansionPendingBytes(); p != 0 {
			fmt.Fprintf(b, " expand-pending=%d", p)
		}
		fmt.Fprintf(b, " created=%d modified=%d create=%d modify=%d\n", v.GetCreatedAt(), v.GetModifiedAt(), v.GetCreateIndex(), v.GetModifyIndex())
	}
	claims, _, err := st.ClaimsPage(nil, "", 0, nil)
	if err != nil {
		return err
	}
	for _, c := range claims {
		holder := "alloc=" + c.GetAllocId()
		if c.GetOperator() {
			holder = "operator"
		}
		fmt.Fprintf(b, "claim %s: volume=%s %s node=%s mode=%s access=%s state=%s", c.GetId(), c.GetVolumeId(), holder, c.GetNodeId(),
			pb.EnumWord(c.GetMode()), pb.EnumWord(c.GetAccessMode()), pb.EnumWord(c.GetState()))
		dumpError(b, c.GetLastError(), c.GetAttempts(), c.GetNextRetryAt())
		fmt.Fprintf(b, " modified=%d", c.GetModifiedAt())
		if s := c.GetStateEnteredAt(); s != 0 {
			fmt.Fprintf(b, " since=%d", s)
		}
		fmt.Fprintf(b, " create=%d modify=%d\n", c.GetCreateIndex(), c.GetModifyIndex())
	}
	hvs, _, err := st.HostVolumesPage(nil, "", 0, nil)
	if err != nil {
		return err
	}
	for _, v := range hvs {
		var caps []string
		for _, c := range v.GetCapabilities() {
			caps = append(caps, pb.EnumWord(c.GetAccessMode())+":"+pb.EnumWord(c.GetAttachmentMode()))
		}
		fmt.Fprintf(b, "host-volume %s: name=%s node=%s path=%s capacity=%d caps=%s state=%s created=%d create=%d modify=%d\n",
			v.GetId(), v.GetName(), v.GetNodeId(), v.GetHostPath(), v.GetCapacityBytes(), strings.Join(caps, ","),
			pb.EnumWord(v.GetState()), v.GetCreatedAt(), v.GetCreateIndex(), v.GetModifyIndex())
	}
	atts, err := st.AttachmentsPage()
	if err != nil {
		return err
	}
	for _, a := range atts {
		fmt.Fprintf(b, "attachment %s/%s: plugin=%s state=%s", a.GetVolumeId(), a.GetNodeId(), a.GetPluginId(), pb.EnumWord(a.GetState()))
		if c := a.GetControllerNodeId(); c != "" {
			fmt.Fprintf(b, " controller=%s", c)
		}
		if c := a.GetCsiNodeId(); c != "" {
			fmt.Fprintf(b, " csi=%s", c)
		}
		if ctx := a.GetPublishContext(); len(ctx) > 0 {
			var kv []string
			for _, k := range sortedKeys(ctx) {
				kv = append(kv, k+":"+ctx[k])
			}
			fmt.Fprintf(b, " context=%s", strings.Join(kv, ","))
		}
		dumpError(b, a.GetLastError(), a.GetAttempts(), a.GetNextRetryAt())
		fmt.Fprintf(b, " modified=%d create=%d modify=%d\n", a.GetModifiedAt(), a.GetCreateIndex(), a.GetModifyIndex())
	}
	return nil
}

func dumpError(b *strings.Builder, e *pb.VolumeError, attempts int32, retry int64) {
	if e == nil && attempts == 0 && retry == 0 {
		return
	}
	fmt.Fprintf(b, " error=%q class=%s attempts=%d retry=%d", e.GetMessage(), pb.EnumWord(e.GetClass()), attempts, retry)
}
