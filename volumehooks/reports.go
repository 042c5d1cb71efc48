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
// capped backoff; a queued report wakes the sender at once, before its
// record is written: the write (an fsync) and the servers' raft write go
// on together (issue 26: a volume move's node-detached report waited for
// its fsync). The write only has to outlast a client restart. A restart
// can send a report again, and not only the newest: a report B that
// replaced a persisted, undelivered A may be delivered before B's write
// lands, and a crash then leaves A in the store, which the restarted
// client sends after B. That is harmless because the servers never move a
// claim back (fsm's claimTransition: a report for an earlier state is
// refused with FailedPrecondition, which is the last word for every
// report but node-detached, and a freed claim answers NotFound); and no
// node-detached report without an error is queued after another on the
// same claim, so the one refusal that is retried cannot loop. A server
// change that lets a claim move back must revisit this.
// A delivered report's record is removed after its write ended (storeMu
// orders them), so none is left behind. A report that cannot be
// persisted (a full disk) is sent all the same — the teardown that
// queued it is done, and nothing else would report it — and its write is
// made again before each try until it is written or the report
// delivered.
type Reporter struct {
	cfg    ReporterConfig
	logger hclog.Logger
	wake   chan struct{}

	// storeMu orders the store's writes of reports; taken before mu.
	storeMu sync.Mutex

	mu      sync.Mutex
	pending map[string]*pb.VolumeReportRecord
	// unsaved holds the keys of pending reports whose write failed.
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

// Queue has req sent and persists it, replacing a report on the same
// claim not yet delivered. It returns once the record is written (or its
// write failed); the report may be on its way, or delivered, by then. A
// report it cannot persist is sent all the same (see Reporter), and the
// error logged.
func (r *Reporter) Queue(req *pb.ClientClaimUpdateRequest) {
	rec := r.enqueue(req)
	if err := r.persist(rec); err != nil {
		r.logger.Error("persisting the report on a claim; sending it all the same, a client restart before it is delivered loses it",
			"volume_id", req.GetVolumeId(), "user", reportKey(req), "state", req.GetState(), "error", err)
	}
}

// enqueue makes req the pending report on its claim and wakes the sender.
func (r *Reporter) enqueue(req *pb.ClientClaimUpdateRequest) *pb.VolumeReportRecord {
	rec := &pb.VolumeReportRecord{Request: proto.CloneOf(req), QueuedAt: r.cfg.Now().UnixNano()}
	key := reportKey(req)
	r.mu.Lock()
	r.pending[key] = rec
	delete(r.unsaved, key)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return rec
}

// persist writes rec while it is pending: not once it was delivered, nor
// once a newer report on its claim replaced it (that one's own write
// follows). A failed write marks it unsaved, for send to make again.
func (r *Reporter) persist(rec *pb.VolumeReportRecord) error {
	key := reportKey(rec.GetRequest())
	r.storeMu.Lock()
	defer r.storeMu.Unlock()
	r.mu.Lock()
	current := r.pending[key] == rec
	r.mu.Unlock()
	if !current {
		return nil
	}
	// Not under mu: the sender reads the pending reports meanwhile. A
	// delivery of rec removes its record under storeMu, after this write.
	err := r.cfg.Store.PutVolumeReport(rec)
	if err != nil {
		r.mu.Lock()
		if r.pending[key] == rec {
			r.unsaved[key] = true
		}
		r.mu.Unlock()
	}
	return err
}

// QueueInUse is Queue for the in-use report of a use just published,
// which returns without waiting for the record's write (an fsync, on the
// path from a volume published to its task starting) unless the report
// carries a node expansion (node_expanded_bytes): only that is known to
// nothing but the record. A plain in-use report is made again after a
// client restart from the use's own record, which the volume manager
// wrote before the publish (VolumeHooks.requeueInUse: a recovered alloc's
// published uses, an operator claim the servers still show ready), so the
// record only spares that restart a report; it is still written, in the background, and its write is
// skipped when the report was delivered or replaced first (persist).
func (r *Reporter) QueueInUse(req *pb.ClientClaimUpdateRequest) {
	if req.GetNodeExpandedBytes() > 0 || req.GetState() != pb.ClaimState_CLAIM_STATE_IN_USE || req.GetError() != nil {
		r.Queue(req)
		return
	}
	rec := r.enqueue(req)
	go func() {
		if err := r.persist(rec); err != nil {
			r.logger.Warn("persisting an in-use report; it is sent all the same, and a client restart reports the use again",
				"volume_id", req.GetVolumeId(), "user", reportKey(req), "error", err)
		}
	}()
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
	r.storeMu.Lock()
	defer r.storeMu.Unlock()
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

// saveAgain persists rec if it is pending and its write failed.
func (r *Reporter) saveAgain(rec *pb.VolumeReportRecord) {
	key := reportKey(rec.GetRequest())
	// Checked first without storeMu: a report whose first write is under
	// way is sent without waiting for it.
	r.mu.Lock()
	failed := r.pending[key] == rec && r.unsaved[key]
	r.mu.Unlock()
	if !failed {
		return
	}
	r.storeMu.Lock()
	defer r.storeMu.Unlock()
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
