package scheduler

import (
	"sort"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/durations"
	"berth.dev/berth/rpc/pb"
)

// Reschedule policy defaults for a group without a reschedule block, as
// Nomad's: services retry forever with a doubling delay from 30s up to an
// hour; batch jobs retry once a day after 5s.
var (
	DefaultServiceReschedule = &pb.ReschedulePolicy{DelayMs: 30_000, MaxDelayMs: 3_600_000, Unlimited: true}
	DefaultBatchReschedule   = &pb.ReschedulePolicy{Attempts: 1, IntervalMs: 24 * 3_600_000, DelayMs: 5_000}
)

// rescheduleBatchWindowNS groups failed allocs whose reschedule times are
// this close into one delayed evaluation, as Nomad does, so a burst of
// failures makes one eval rather than one each.
const rescheduleBatchWindowNS = 5_000_000_000

// maxRescheduleDelayMS bounds a doubling delay without max_delay_ms (a
// year), so a long chain of failures cannot overflow the time.
const maxRescheduleDelayMS = 365 * 24 * 3_600_000

// reschedulePolicy returns the group's policy or the default for the type.
func reschedulePolicy(batch bool, tg *pb.TaskGroup) *pb.ReschedulePolicy {
	if p := tg.GetReschedule(); p != nil {
		return p
	}
	if batch {
		return DefaultBatchReschedule
	}
	return DefaultServiceReschedule
}

// failedAt is when a failed alloc stopped: its last task's finish, else
// its last change.
func failedAt(a *pb.Allocation, now int64) int64 {
	var t int64
	for _, ts := range a.GetTaskStates() {
		t = max(t, ts.GetFinishedAt())
	}
	if t == 0 {
		t = a.GetModifiedAt()
	}
	if t == 0 {
		t = now
	}
	return t
}

// RescheduleDecision is what happens to one failed alloc.
type RescheduleDecision struct {
	// Eligible is false when the policy's attempts in its interval are used.
	Eligible bool
	// At is when the replacement may be placed (unix nanoseconds).
	At int64
	// DelayMS is the delay applied, recorded in the reschedule event.
	DelayMS int64
}

// Reschedule applies policy p to failed alloc a at time now. The delay
// doubles with each earlier reschedule of the alloc's chain (its
// reschedule_events), up to max_delay_ms; attempts count the events inside
// the interval before now.
func Reschedule(p *pb.ReschedulePolicy, a *pb.Allocation, now int64) RescheduleDecision {
	events := a.GetRescheduleEvents()
	if !p.GetUnlimited() {
		if p.GetAttempts() <= 0 {
			return RescheduleDecision{}
		}
		from := durations.AddMs(now, -p.GetIntervalMs())
		n := int32(0)
		for _, e := range events {
			if p.GetIntervalMs() <= 0 || e.GetRescheduledAt() > from {
				n++
			}
		}
		if n >= p.GetAttempts() {
			return RescheduleDecision{}
		}
	}
	delay := p.GetDelayMs()
	for i := 0; i < len(events) && delay > 0; i++ {
		if delay > maxRescheduleDelayMS/2 {
			delay = maxRescheduleDelayMS
			break
		}
		delay *= 2
		if p.GetMaxDelayMs() > 0 && delay >= p.GetMaxDelayMs() {
			break
		}
	}
	if p.GetMaxDelayMs() > 0 {
		delay = min(delay, p.GetMaxDelayMs())
	}
	return RescheduleDecision{Eligible: true, At: durations.AddMs(failedAt(a, now), delay), DelayMS: delay}
}

// rescheduleEvents is prev's history plus this reschedule.
func rescheduleEvents(prev *pb.Allocation, now, delayMS int64) []*pb.RescheduleEvent {
	out := make([]*pb.RescheduleEvent, 0, len(prev.GetRescheduleEvents())+1)
	for _, e := range prev.GetRescheduleEvents() {
		out = append(out, proto.Clone(e).(*pb.RescheduleEvent))
	}
	return append(out, &pb.RescheduleEvent{
		RescheduledAt: now,
		PrevAllocId:   prev.GetId(),
		PrevNodeId:    prev.GetNodeId(),
		DelayMs:       delayMS,
	})
}

// delayed is a failed alloc waiting for its reschedule time.
type delayed struct {
	alloc *pb.Allocation
	at    int64
}

// scheduleDelayed makes one pending eval (wait_until set) per batch of
// failed allocs whose times fall within rescheduleBatchWindowNS, and links
// each alloc to its eval with an AllocStop whose desired_status stays RUN:
// the alloc is not stopped, only told which eval will replace it.
func (s *sched) scheduleDelayed(ds []delayed) {
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].at != ds[j].at {
			return ds[i].at < ds[j].at
		}
		return ds[i].alloc.GetId() < ds[j].alloc.GetId()
	})
	for i := 0; i < len(ds); {
		j := i
		for j < len(ds) && ds[j].at-ds[i].at <= rescheduleBatchWindowNS {
			j++
		}
		e := s.newEval(pb.EvalTrigger_EVAL_TRIGGER_RETRY_FAILED_ALLOC, pb.EvalStatus_EVAL_STATUS_PENDING, ds[j-1].at)
		e.StatusDescription = "created to reschedule failed allocations after their delay"
		for _, d := range ds[i:j] {
			s.plan.Stops = append(s.plan.Stops, &pb.AllocStop{
				AllocId:            d.alloc.GetId(),
				DesiredStatus:      pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN,
				DesiredDescription: d.alloc.GetDesiredDescription(),
				ClientStatus:       d.alloc.GetClientStatus(),
				FollowupEvalId:     e.GetId(),
			})
		}
		i = j
	}
}
