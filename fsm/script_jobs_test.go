package fsm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// The script commands of jobs, evals, allocs and node operations. Those
// with lines of input take one sub-command a line (args as on a command
// line):
//
//	register-job id= [type=service|batch|system priority= eval= eval-job= enforce=true if=N at=]
//	             [csi=(plugin:controller|node|monolith,...)]   a task per plugin in group web
//	csi-update node= [at=]          a NodeCSIUpdate: the node's whole plugin set
//	  controller|node plugin= [healthy=false desc= provider= version= alloc= required=true key= max=N]
//	deregister-job id= [purge=true eval= at=]
//	revert-job id= version= [prior=N eval= at=]
//	upsert-eval id=(e1,...) job= status= [trigger= node=]
//	plan eval= job= [all-at-once=true at=]
//	  place id= node= [group= cpu= mem= version= prev=]
//	  update id= node= [cpu= mem= version=]
//	  stop id= [status=stop|evict desc= lost=true followup=]
//	  eval id= job= status= [trigger=]
//	  claim id= alloc= volume= [mode= access= attach=]   (script_volumes_test.go)
//	client-update node=
//	  alloc id= [status= desc= tasks=(name:state,...) at=]
//	  eval id= job= status= [trigger=]
//	transition [at=]
//	  alloc id= [migrate=true reschedule=true no-replace=true]
//	  eval id= job= status= [trigger=]
//	eligibility node= eligible=true|false [evals=(id:job,...)]
//	drain node= [deadline= started=] [off=true mark-eligible=true] [evals=(id:job,...)]
//	gc [allocs=(..) evals=(..) jobs=(..)]
//	gc-candidates before=N [limit=N]   print what GCCandidates proposes
//	batch                              apply the commands of its input (one a
//	                                   line, their own input indented below
//	                                   them) as one raft batch
//
// update-status and register-node take evals=(id:job,...) and cpu= mem=
// eligible= too. The evals a command creates are pending unless said.

// encodeJobCommand returns the raft entry of one of the commands above.
func encodeJobCommand(t *testing.T, td *datadriven.TestData) ([]byte, bool) {
	at := argInt(t, td, "at", 0)
	switch td.Cmd {
	case "register-job":
		id := argString(t, td, "id", "")
		job := &pb.Job{
			Id: id, Name: id, Type: argJobType(t, td), Priority: int32(argInt(t, td, "priority", 50)),
			Groups: []*pb.TaskGroup{{Name: "web", Count: 1}},
		}
		if arg, ok := td.Arg("csi"); ok {
			for _, v := range arg.Vals {
				plugin, typ, _ := strings.Cut(v, ":")
				job.Groups[0].Tasks = append(job.Groups[0].Tasks, &pb.Task{Name: plugin + "-" + typ, Driver: "exec",
					CsiPlugin: &pb.CSIPluginConfig{Id: plugin, Type: typ}})
			}
		}
		return mustEncode(t, fsm.JobRegister, &pb.JobRegisterCommand{
			Job: job, Eval: jobEval(t, td, id, pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER),
			EnforceIndex: argBool(t, td, "enforce"), IfJobModifyIndex: uint64(argInt(t, td, "if", 0)), SubmittedAt: at,
		}), true
	case "deregister-job":
		id := argString(t, td, "id", "")
		return mustEncode(t, fsm.JobDeregister, &pb.JobDeregisterCommand{
			JobId: id, Purge: argBool(t, td, "purge"),
			Eval: jobEval(t, td, id, pb.EvalTrigger_EVAL_TRIGGER_JOB_DEREGISTER), SubmittedAt: at,
		}), true
	case "revert-job":
		id := argString(t, td, "id", "")
		return mustEncode(t, fsm.JobRevert, &pb.JobRevertCommand{
			JobId: id, Version: uint64(argInt(t, td, "version", 0)),
			EnforcePriorVersion: td.HasArg("prior"), PriorVersion: uint64(argInt(t, td, "prior", 0)),
			Eval: jobEval(t, td, id, pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER), SubmittedAt: at,
		}), true
	case "upsert-eval":
		var evals []*pb.Evaluation
		arg, _ := td.Arg("id")
		for _, id := range arg.Vals {
			evals = append(evals, &pb.Evaluation{
				Id: id, JobId: argString(t, td, "job", ""), NodeId: argString(t, td, "node", ""),
				Status:      argEvalStatus(t, td, "status", pb.EvalStatus_EVAL_STATUS_PENDING),
				TriggeredBy: argTrigger(t, td, pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER),
			})
		}
		return mustEncode(t, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: evals}), true
	case "plan":
		return mustEncode(t, fsm.PlanApply, planCommand(t, td)), true
	case "client-update":
		cmd := &pb.AllocClientUpdateCommand{NodeId: argString(t, td, "node", ""), ReceivedAt: argInt(t, td, "received", 0)}
		for _, line := range inputLines(t, td) {
			switch line.Cmd {
			case "alloc":
				u := &pb.AllocClientUpdate{
					AllocId: argString(t, line, "id", ""), ClientDescription: argString(t, line, "desc", ""),
					ClientStatus: argClientStatus(t, line, "status"), UpdatedAt: argInt(t, line, "at", 0),
				}
				if arg, ok := line.Arg("tasks"); ok {
					u.TaskStates = map[string]*pb.TaskState{}
					for _, v := range arg.Vals {
						name, state, _ := strings.Cut(v, ":")
						u.TaskStates[name] = &pb.TaskState{State: pb.TaskLifecycleState(pb.TaskLifecycleState_value["TASK_LIFECYCLE_STATE_"+strings.ToUpper(state)])}
					}
				}
				cmd.Updates = append(cmd.Updates, u)
			case "eval":
				cmd.Evals = append(cmd.Evals, lineEval(t, line))
			default:
				line.Fatalf(t, "client-update: unknown line %q", line.Cmd)
			}
		}
		return mustEncode(t, fsm.AllocClientUpdate, cmd), true
	case "transition":
		cmd := &pb.AllocDesiredTransitionCommand{Allocs: map[string]*pb.DesiredTransition{}, UpdatedAt: at}
		for _, line := range inputLines(t, td) {
			switch line.Cmd {
			case "alloc":
				cmd.Allocs[argString(t, line, "id", "")] = &pb.DesiredTransition{
					Migrate: argBool(t, line, "migrate"), Reschedule: argBool(t, line, "reschedule"), NoReplace: argBool(t, line, "no-replace"),
				}
			case "eval":
				cmd.Evals = append(cmd.Evals, lineEval(t, line))
			default:
				line.Fatalf(t, "transition: unknown line %q", line.Cmd)
			}
		}
		return mustEncode(t, fsm.AllocDesiredTransition, cmd), true
	case "eligibility":
		return mustEncode(t, fsm.NodeEligibility, &pb.NodeEligibilityCommand{
			NodeId: argString(t, td, "node", ""), Eligibility: argEligibility(t, td),
			Evals: argEvals(t, td, pb.EvalTrigger_EVAL_TRIGGER_NODE_ELIGIBILITY), UpdatedAt: at,
		}), true
	case "drain":
		cmd := &pb.NodeDrainCommand{
			NodeId: argString(t, td, "node", ""), MarkEligible: argBool(t, td, "mark-eligible"),
			Evals: argEvals(t, td, pb.EvalTrigger_EVAL_TRIGGER_NODE_DRAIN), UpdatedAt: at,
		}
		if !argBool(t, td, "off") {
			cmd.Drain = &pb.DrainStrategy{DeadlineMs: argInt(t, td, "deadline", 0), StartedAt: argInt(t, td, "started", 0)}
		}
		return mustEncode(t, fsm.NodeDrain, cmd), true
	case "csi-update":
		// rule=legacy: proposed by a leader while a server in the
		// configuration is older than the derive_from_serving rule.
		cmd := &pb.NodeCSIUpdateCommand{NodeId: argString(t, td, "node", ""), UpdatedAt: at,
			DeriveFromServing: argString(t, td, "rule", "serving") == "serving"}
		for _, line := range inputLines(t, td) {
			plugin := argString(t, line, "plugin", "")
			info := &pb.CSIPluginInfo{
				PluginId: plugin, Healthy: argString(t, line, "healthy", "true") == "true",
				HealthDescription: argString(t, line, "desc", ""), Provider: argString(t, line, "provider", ""),
				ProviderVersion: argString(t, line, "version", ""), AllocId: argString(t, line, "alloc", ""),
				ControllerRequired: argBool(t, line, "required"), UpdatedAt: at,
			}
			if limit := argInt(t, line, "max", 0); limit > 0 {
				info.NodeInfo = &pb.CSINodeInfo{MaxVolumes: limit}
			}
			key := argString(t, line, "key", plugin)
			switch line.Cmd {
			case "controller":
				info.Type = pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER
				// A controller fingerprinted reports its capabilities;
				// one never fingerprinted (fingerprinted=false) none.
				if argString(t, line, "fingerprinted", "true") == "true" {
					info.ControllerInfo = &pb.CSIControllerInfo{SupportsAttachDetach: info.GetControllerRequired()}
				}
				if cmd.Controllers == nil {
					cmd.Controllers = map[string]*pb.CSIPluginInfo{}
				}
				cmd.Controllers[key] = info
			case "node":
				info.Type = pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE
				if cmd.Nodes == nil {
					cmd.Nodes = map[string]*pb.CSIPluginInfo{}
				}
				cmd.Nodes[key] = info
			default:
				line.Fatalf(t, "csi-update: unknown line %q", line.Cmd)
			}
		}
		return mustEncode(t, fsm.NodeCSIUpdate, cmd), true
	case "gc":
		cmd := &pb.GCCommand{CollectedAt: argInt(t, td, "at", 0)}
		for _, f := range []struct {
			key string
			ids *[]string
		}{{"allocs", &cmd.AllocIds}, {"evals", &cmd.EvalIds}, {"jobs", &cmd.JobIds}} {
			if arg, ok := td.Arg(f.key); ok {
				*f.ids = arg.Vals
			}
		}
		return mustEncode(t, fsm.GC, cmd), true
	}
	return encodeVolumeCommand(t, td)
}

// planCommand builds a PlanApply from the plan command's lines.
func planCommand(t *testing.T, td *datadriven.TestData) *pb.PlanApplyCommand {
	jobID := argString(t, td, "job", "")
	evalID := argString(t, td, "eval", "")
	plan := &pb.Plan{EvalId: evalID, JobId: jobID, AllAtOnce: argBool(t, td, "all-at-once")}
	cmd := &pb.PlanApplyCommand{Plan: plan, AppliedAt: argInt(t, td, "at", 0)}
	for _, line := range inputLines(t, td) {
		switch line.Cmd {
		case "place", "update":
			id := argString(t, line, "id", "")
			plan.Allocs = append(plan.Allocs, &pb.Allocation{
				Id: id, Name: jobID + ".web", EvalId: evalID, NodeId: argString(t, line, "node", ""),
				JobId: argString(t, line, "job", jobID), JobVersion: uint64(argInt(t, line, "version", 0)),
				TaskGroup:          argString(t, line, "group", "web"),
				Resources:          &pb.AllocResources{CpuMhz: argInt(t, line, "cpu", 100), MemoryMb: argInt(t, line, "mem", 64)},
				PreviousAllocation: argString(t, line, "prev", ""),
			})
		case "stop":
			s := &pb.AllocStop{AllocId: argString(t, line, "id", ""), DesiredDescription: argString(t, line, "desc", ""),
				FollowupEvalId: argString(t, line, "followup", "")}
			switch argString(t, line, "status", "stop") {
			case "stop":
				s.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP
			case "evict":
				s.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_EVICT
			default:
				line.Fatalf(t, "stop status: stop or evict")
			}
			if argBool(t, line, "lost") {
				s.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_LOST
			}
			plan.Stops = append(plan.Stops, s)
		case "claim":
			plan.Claims = append(plan.Claims, scriptClaim(t, line))
		case "eval":
			cmd.Evals = append(cmd.Evals, lineEval(t, line))
		default:
			line.Fatalf(t, "plan: unknown line %q", line.Cmd)
		}
	}
	return cmd
}

// inputLines parses a command's input, one sub-command a line.
func inputLines(t *testing.T, td *datadriven.TestData) []*datadriven.TestData {
	var lines []*datadriven.TestData
	for line := range strings.Lines(td.Input) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		cmd, args, err := datadriven.ParseLine(line)
		if err != nil {
			td.Fatalf(t, "%q: %v", line, err)
		}
		lines = append(lines, &datadriven.TestData{Pos: td.Pos, Cmd: cmd, CmdArgs: args})
	}
	return lines
}

// batch applies the commands of td's input in one ApplyBatch, as raft hands
// an FSM the entries it committed together, and reports each result.
func (h *scriptHarness) batch(t *testing.T, td *datadriven.TestData, out *strings.Builder) {
	var cmds []*datadriven.TestData
	for line := range strings.Lines(td.Input) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if strings.HasPrefix(line, " ") && len(cmds) > 0 {
			cmds[len(cmds)-1].Input += line
			continue
		}
		cmd, args, err := datadriven.ParseLine(strings.TrimSpace(line))
		if err != nil {
			td.Fatalf(t, "%q: %v", line, err)
		}
		cmds = append(cmds, &datadriven.TestData{Pos: td.Pos, Cmd: cmd, CmdArgs: args})
	}
	logs := make([]*raft.Log, len(cmds))
	for i, c := range cmds {
		data, ok := h.encode(t, c)
		if !ok {
			td.Fatalf(t, "batch: %q applies no entry", c.Cmd)
		}
		logs[i] = &raft.Log{Index: h.next, Term: 1, Type: raft.LogCommand, Data: data}
		h.next++
	}
	fmt.Fprintf(out, "batch of %d\n", len(logs))
	for _, r := range h.fsm.ApplyBatch(logs) {
		h.report(out, r.(*fsm.ApplyResult))
	}
}

// jobEval is the eval a job command creates: eval=ID, pending.
func jobEval(t *testing.T, td *datadriven.TestData, jobID string, trigger pb.EvalTrigger) *pb.Evaluation {
	id := argString(t, td, "eval", "")
	if id == "" {
		return nil
	}
	return &pb.Evaluation{Id: id, JobId: argString(t, td, "eval-job", jobID), Status: pb.EvalStatus_EVAL_STATUS_PENDING, TriggeredBy: trigger}
}

// lineEval is an "eval id= job= status= [trigger=]" line.
func lineEval(t *testing.T, td *datadriven.TestData) *pb.Evaluation {
	return &pb.Evaluation{
		Id: argString(t, td, "id", ""), JobId: argString(t, td, "job", ""),
		Status:      argEvalStatus(t, td, "status", pb.EvalStatus_EVAL_STATUS_PENDING),
		TriggeredBy: argTrigger(t, td, pb.EvalTrigger_EVAL_TRIGGER_UNSPECIFIED),
	}
}

// argEvals reads evals=(id:job,...), pending evals with the trigger given.
func argEvals(t *testing.T, td *datadriven.TestData, trigger pb.EvalTrigger) []*pb.Evaluation {
	arg, ok := td.Arg("evals")
	if !ok {
		return nil
	}
	var evals []*pb.Evaluation
	for _, v := range arg.Vals {
		id, job, _ := strings.Cut(v, ":")
		evals = append(evals, &pb.Evaluation{Id: id, JobId: job, NodeId: argString(t, td, "node", argString(t, td, "id", "")),
			Status: pb.EvalStatus_EVAL_STATUS_PENDING, TriggeredBy: trigger})
	}
	return evals
}

func argBool(t *testing.T, td *datadriven.TestData, key string) bool {
	switch v := argString(t, td, key, "false"); v {
	case "true":
		return true
	case "false":
		return false
	default:
		td.Fatalf(t, "%s=%q: want true or false", key, v)
		return false
	}
}

// argEnum reads key= as a word of an enum whose values are PREFIX_WORD.
func argEnum(t *testing.T, td *datadriven.TestData, key, prefix string, values map[string]int32, def int32) int32 {
	if !td.HasArg(key) {
		return def
	}
	word := argString(t, td, key, "")
	v, ok := values[prefix+strings.ToUpper(strings.ReplaceAll(word, "-", "_"))]
	if !ok {
		td.Fatalf(t, "%s=%q: not a %s word", key, word, prefix)
	}
	return v
}

func argJobType(t *testing.T, td *datadriven.TestData) pb.JobType {
	return pb.JobType(argEnum(t, td, "type", "JOB_TYPE_", pb.JobType_value, int32(pb.JobType_JOB_TYPE_SERVICE)))
}

func argEvalStatus(t *testing.T, td *datadriven.TestData, key string, def pb.EvalStatus) pb.EvalStatus {
	return pb.EvalStatus(argEnum(t, td, key, "EVAL_STATUS_", pb.EvalStatus_value, int32(def)))
}

func argTrigger(t *testing.T, td *datadriven.TestData, def pb.EvalTrigger) pb.EvalTrigger {
	return pb.EvalTrigger(argEnum(t, td, "trigger", "EVAL_TRIGGER_", pb.EvalTrigger_value, int32(def)))
}

func argClientStatus(t *testing.T, td *datadriven.TestData, key string) pb.AllocClientStatus {
	return pb.AllocClientStatus(argEnum(t, td, key, "ALLOC_CLIENT_STATUS_", pb.AllocClientStatus_value, 0))
}

func argEligibility(t *testing.T, td *datadriven.TestData) pb.NodeEligibility {
	if !td.HasArg("eligible") {
		return pb.NodeEligibility_NODE_ELIGIBILITY_UNSPECIFIED
	}
	if argBool(t, td, "eligible") {
		return pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE
	}
	return pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE
}
