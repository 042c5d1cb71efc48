package volumehooks

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// Claims is the client's side of the servers' Claims service, over the
// client's server failover. The node ID is in each request.
type Claims interface {
	ClientClaim(ctx context.Context, req *pb.ClientClaimRequest) (*pb.ClientClaimResponse, error)
	ClientClaimUpdate(ctx context.Context, req *pb.ClientClaimUpdateRequest) (*pb.ClientClaimUpdateResponse, error)
}

// ReportStore keeps the reports not delivered yet (host/client/state.DB
// implements it).
type ReportStore interface {
	PutVolumeReport(rec *pb.VolumeReportRecord) error
	DeleteVolumeReport(req *pb.ClientClaimUpdateRequest) error
	VolumeReports() ([]*pb.VolumeReportRecord, error)
}

// ReporterConfig configures a Reporter.
type ReporterConfig struct {
	Claims Claims
	Store  ReportStore
	Logger hclog.Logger
	// RetryStart and RetryMax space the tries of a report the servers did
	// not take (defaults 100ms and 10s).
	RetryStart, RetryMax time.Duration
	// CallTimeout bounds one ClientClaimUpdate (default 30s).
	CallTimeout time.Duration
	Now         func() time.Time
}

// Reporter delivers the client's reports on its claims (in-use,
// node-detached, failed tries) to the servers. A report is persisted when
// queued and removed once delivered, so neither a teardown nor a client
// restart waits for a reachable server; one report per claim is kept, the
// newest. Reports are sent at once, and those that fail again with
// capped backoff; a queued report wakes the sender at once. A report that
// cannot be persisted (a full disk) is sent all the same — the teardown
// that queued it is done, and nothing else would report it — and its
// write is made again before each try until it is written or the report
// delivered.
type Reporter struct {
	cfg    ReporterConfig
	logger hclog.Logger
	wake   chan struct{}

	mu      sync.Mutex
	pending map[string]*pb.VolumeReportRecord
	// unsaved holds the keys of pending reports not persisted.
	unsaved map[string]bool
}

// NewReporter returns a reporter holding the reports the store kept. It
// sends nothing until Run.
func NewReporter(cfg ReporterConfig) (*Reporter, error) {
	if cfg.Claims == nil || cfg.Store == nil {
		return nil, fmt.Errorf("%w: reporter needs the claims service and a store", ErrNotConfigured)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.RetryStart <= 0 {
		cfg.RetryStart = 100 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryStart {
		cfg.RetryMax = max(10*time.Second, cfg.RetryStart)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Reporter{cfg: cfg, logger: cfg.Logger.Named("volume_reports"), wake: make(chan struct{}, 1),
		pending: map[string]*pb.VolumeReportRecord{}, unsaved: map[string]bool{}}
	recs, err := cfg.Store.VolumeReports()
	if err != nil {
		r.logger.Error("some queued volume reports are unreadable", "error", err)
	}
	for _, rec := range recs {
		r.pending[reportKey(rec.GetRequest())] = rec
	}
	return r, nil
}

func reportKey(req *pb.ClientClaimUpdateRequest) string {
	user := req.GetAllocId()
	if user == "" {
		user = req.GetClaimId()
	}
	return userVolumeKey(user, req.GetVolumeId())
}

// Queue persists req and has it sent, replacing a report on the same
// claim not yet delivered. A report it cannot persist is sent all the
// same (see Reporter), and the error logged.
func (r *Reporter) Queue(req *pb.ClientClaimUpdateRequest) {
	rec := &pb.VolumeReportRecord{Request: proto.CloneOf(req), QueuedAt: r.cfg.Now().UnixNano()}
	key := reportKey(req)
	r.mu.Lock()
	// Under mu: a delivery of the report this one replaces deletes its
	// record before this one is written, or finds this one pending.
	err := r.cfg.Store.PutVolumeReport(rec)
	r.pending[key] = rec
	if err != nil {
		r.unsaved[key] = true
	} else {
		delete(r.unsaved, key)
	}
	r.mu.Unlock()
	if err != nil {
		r.logger.Error("persisting the report on a claim; sending it all the same, a client restart before it is delivered loses it",
			"volume_id", req.GetVolumeId(), "user", key, "state", req.GetState(), "error", err)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// QueueInUseAgain is Queue for an in-use report queued again (a restarted
// client's, VolumeHooks.requeueInUse), which keeps an in-use report on the
// same claim still pending instead: that one is sent already, and may
// carry the node expansion made at stage (node_expanded_bytes), which the
// one queued again does not know of.
func (r *Reporter) QueueInUseAgain(req *pb.ClientClaimUpdateRequest) {
	r.mu.Lock()
	p := r.pending[reportKey(req)].GetRequest()
	r.mu.Unlock()
	if p.GetState() == pb.ClaimState_CLAIM_STATE_IN_USE && p.GetError() == nil {
		return
	}
	r.Queue(req)
}

// Pending returns the reports not delivered yet.
func (r *Reporter) Pending() []*pb.ClientClaimUpdateRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*pb.ClientClaimUpdateRequest, 0, len(r.pending))
	for _, rec := range r.pending {
		out = append(out, proto.CloneOf(rec.GetRequest()))
	}
	return out
}

// Run sends the reports until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	retry := backoff.Backoff{Initial: r.cfg.RetryStart, Max: r.cfg.RetryMax}
	// failures counts the consecutive rounds that left a report to try
	// again; a queued report waking a round early does not reset it.
	failures := 0
	for {
		failed := r.sendAll(ctx)
		if failed {
			failures++
			t := time.NewTimer(retry.Delay(failures))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-r.wake:
				t.Stop()
			case <-t.C:
			}
			continue
		}
		failures = 0
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
	}
}

// reportsInFlight bounds the reports one round sends at once.
const reportsInFlight = 32

// sendAll tries every pending report once; failed says whether one is to
// be tried again. The reports go out together, not one after another:
// each is a raft write on the servers (~100 ms on a busy disk), which a
// node with many claims — every alloc's in-use report after a mass
// placement — waited out in turn (15 reports took 2.5 s), while the
// servers write reports that arrive together in one raft batch. Each is
// still its own ClaimUpdate, refused or failed on its own (the log names
// its volume, alloc and claim), and a round holds one report per claim,
// so the reports of one claim never overtake each other.
func (r *Reporter) sendAll(ctx context.Context) (failed bool) {
	r.mu.Lock()
	batch := make([]*pb.VolumeReportRecord, 0, len(r.pending))
	for _, rec := range r.pending {
		batch = append(batch, rec)
	}
	r.mu.Unlock()
	var (
		failedAny atomic.Bool
		wg        sync.WaitGroup
		slots     = make(chan struct{}, reportsInFlight)
	)
	for _, rec := range batch {
		if ctx.Err() != nil {
			failedAny.Store(true)
			break
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if !r.send(ctx, rec) {
				failedAny.Store(true)
			}
		})
	}
	wg.Wait()
	return failedAny.Load()
}

// send tries one report; false says it is to be tried again.
func (r *Reporter) send(ctx context.Context, rec *pb.VolumeReportRecord) bool {
	req := rec.GetRequest()
	r.saveAgain(rec)
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	_, err := r.cfg.Claims.ClientClaimUpdate(cctx, req)
	cancel()
	if err != nil && !dropReport(req, err) {
		r.logger.Warn("report on a claim not delivered, will retry", "volume_id", req.GetVolumeId(), "alloc_id", req.GetAllocId(),
			"claim_id", req.GetClaimId(), "state", req.GetState(), "error", err)
		return false
	}
	if err != nil {
		r.logger.Info("report on a claim refused, dropped", "volume_id", req.GetVolumeId(), "alloc_id", req.GetAllocId(),
			"claim_id", req.GetClaimId(), "state", req.GetState(), "error", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// A newer report queued meanwhile stays.
	if r.pending[reportKey(req)] == rec {
		if derr := r.cfg.Store.DeleteVolumeReport(req); derr != nil {
			r.logger.Error("removing a delivered report", "volume_id", req.GetVolumeId(), "error", derr)
		}
		delete(r.pending, reportKey(req))
		delete(r.unsaved, reportKey(req))
	}
	return true
}

// saveAgain persists rec if it is pending and was not persisted.
func (r *Reporter) saveAgain(rec *pb.VolumeReportRecord) {
	key := reportKey(rec.GetRequest())
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending[key] != rec || !r.unsaved[key] {
		return
	}
	if err := r.cfg.Store.PutVolumeReport(rec); err == nil {
		delete(r.unsaved, key)
	}
}

// dropReport says whether the servers' refusal of req is their last
// word. A claim gone, another node's, or a request they cannot take will
// not change. FailedPrecondition will, for node-detached (the servers
// have not yet moved the claim to releasing: the alloc's stop is on its
// way to them); for in-use and failed tries it means the claim moved on.
// The unconditional codes are errcode.ReportRefusal.
func dropReport(req *pb.ClientClaimUpdateRequest, err error) bool {
	switch code := errcode.Code(err); {
	case errcode.ReportRefusal.Has(code):
		return true
	case code == codes.FailedPrecondition:
		return req.GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED || req.GetError() != nil
	}
	return false
}
