package evals

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// Core is what the evaluation loops need of the server core: the local
// state store, the leader's proposals, and the table rule's check that
// every server is new enough for a command.
type Core interface {
	State() *fsm.StateStore
	Apply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error)
	ApplyResult(ctx context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error)
	RequireServersAt(c versions.Constraint, since, what string) error
}

// Config holds the evaluation loops' settings.
type Config struct {
	// Workers is how many scheduler workers run while the server leads.
	Workers int
	// JobLimits bounds a job the workers plan (see refuseOverLimits).
	JobLimits jobspec.Limits
	// PlanPartBytes bounds the placements, stops and claims of one plan
	// command (planParts); zero means DefaultPlanPartBytes.
	PlanPartBytes int
	Clock         clock.Clock
	Logger        hclog.Logger
}

// Hooks hold the workers at points where a test would otherwise depend on
// timing. Production servers pass none.
type Hooks struct {
	// BeforePlan runs in a scheduler worker with the evaluation in hand,
	// after scheduling and before the plan is proposed; it must return
	// when ctx (the leadership) ends.
	BeforePlan func(ctx context.Context, eval *pb.Evaluation)
}

// Runner runs the leader's evaluation duties: the feed that hands pending
// evaluations to the broker (and wakes blocked ones), and the scheduler
// workers that plan them. One lives as long as the server; Run holds it
// for one leadership.
type Runner struct {
	core   Core
	cfg    Config
	hooks  Hooks
	broker *Broker
	logger hclog.Logger
	// feedRetry asks the feed for a later pass (retryFeed).
	feedRetry chan struct{}
	// unblockFault, set by tests only, fails unblock at an evaluation.
	unblockFault func(*pb.Evaluation) error
}

// NewRunner returns the evaluation loops over core, with a disabled broker.
func NewRunner(core Core, cfg Config, hooks Hooks) *Runner {
	if cfg.PlanPartBytes <= 0 {
		cfg.PlanPartBytes = DefaultPlanPartBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &Runner{
		core:      core,
		cfg:       cfg,
		hooks:     hooks,
		broker:    newBroker(cfg.Clock, brokerConfig{}),
		logger:    cfg.Logger,
		feedRetry: make(chan struct{}, 1),
	}
}

// Broker returns the runner's evaluation broker. The server enables it
// while it leads and its leadership is ready.
func (r *Runner) Broker() *Broker { return r.broker }

// Run starts, through spawn, the scheduler workers and the broker's feed,
// which run until ctx (the leadership) ends.
func (r *Runner) Run(ctx context.Context, spawn func(func())) {
	r.runWorkers(ctx, r.cfg.Workers, spawn)
	spawn(func() { r.feedBroker(ctx) })
}

// DefaultPlanPartBytes bounds the placements, stops and claims of one plan
// command: a quarter of the message limit, so a part with its evaluations
// and header is always proposable. A plan scales with nodes (a system job
// places groups x eligible nodes, not bounded by job_max_allocs): one
// over the limit was refused as ErrCommandTooLarge on every attempt, for
// ever, and the job ran nowhere.
const DefaultPlanPartBytes = rpc.MaxMessageSize / 4
