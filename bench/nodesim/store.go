package main

import (
	"sync"

	"berth.dev/berth/rpc/pb"
)

// memStore is a simulated node's client state DB: the records the client
// writes (allocs, task states, volume usage, queued claim reports, the node
// secret), kept in memory. host/client's bbolt DB would cost a file, an mmap
// and an fsync per write for each of thousands of nodes; the simulator never
// restarts a node, so nothing needs to outlive the process. Records are kept
// as given, not copied.
type memStore struct {
	mu         sync.Mutex
	allocs     map[string]*pb.AllocRecord
	taskStates map[string]map[string]*pb.TaskStateRecord // alloc → task
	usages     map[string]*pb.VolumeUsageRecord
	reports    map[string]*pb.VolumeReportRecord
	secret     string
}

func newMemStore() *memStore {
	return &memStore{}
}

func (s *memStore) PutAlloc(rec *pb.AllocRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.allocs == nil {
		s.allocs = map[string]*pb.AllocRecord{}
	}
	s.allocs[rec.GetAlloc().GetId()] = rec
	return nil
}

func (s *memStore) PutTaskState(rec *pb.TaskStateRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taskStates == nil {
		s.taskStates = map[string]map[string]*pb.TaskStateRecord{}
	}
	m := s.taskStates[rec.GetAllocId()]
	if m == nil {
		m = map[string]*pb.TaskStateRecord{}
		s.taskStates[rec.GetAllocId()] = m
	}
	m[rec.GetTask()] = rec
	return nil
}

func (s *memStore) DeleteAlloc(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.allocs, id)
	delete(s.taskStates, id)
	return nil
}

func (s *memStore) Allocs() ([]*pb.AllocRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pb.AllocRecord, 0, len(s.allocs))
	for _, r := range s.allocs {
		out = append(out, r)
	}
	return out, nil
}

func (s *memStore) TaskStates(allocID string) ([]*pb.TaskStateRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pb.TaskStateRecord, 0, len(s.taskStates[allocID]))
	for _, r := range s.taskStates[allocID] {
		out = append(out, r)
	}
	return out, nil
}

// Task handles are persisted by the driver manager, which the simulator
// does not run (its mock drivers are called in process): there are none.
func (s *memStore) TaskHandle(string) (*pb.TaskHandleRecord, bool, error) { return nil, false, nil }
func (s *memStore) TaskHandles() ([]*pb.TaskHandleRecord, error)          { return nil, nil }

func (s *memStore) PutVolumeUsage(rec *pb.VolumeUsageRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.usages == nil {
		s.usages = map[string]*pb.VolumeUsageRecord{}
	}
	s.usages[rec.GetVolumeId()] = rec
	return nil
}

func (s *memStore) DeleteVolumeUsage(volumeID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.usages, volumeID)
	return nil
}

func (s *memStore) VolumeUsages() ([]*pb.VolumeUsageRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pb.VolumeUsageRecord, 0, len(s.usages))
	for _, r := range s.usages {
		out = append(out, r)
	}
	return out, nil
}

// reportKey is the state DB's key of a queued claim report: one per
// (alloc or operator claim, volume).
func reportKey(req *pb.ClientClaimUpdateRequest) string {
	user := req.GetAllocId()
	if user == "" {
		user = req.GetClaimId()
	}
	return user + "/" + req.GetVolumeId()
}

func (s *memStore) PutVolumeReport(rec *pb.VolumeReportRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reports == nil {
		s.reports = map[string]*pb.VolumeReportRecord{}
	}
	s.reports[reportKey(rec.GetRequest())] = rec
	return nil
}

func (s *memStore) DeleteVolumeReport(req *pb.ClientClaimUpdateRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.reports, reportKey(req))
	return nil
}

func (s *memStore) VolumeReports() ([]*pb.VolumeReportRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pb.VolumeReportRecord, 0, len(s.reports))
	for _, r := range s.reports {
		out = append(out, r)
	}
	return out, nil
}

func (s *memStore) NodeSecret() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.secret, nil
}

func (s *memStore) PutNodeSecret(secret string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secret = secret
	return nil
}
