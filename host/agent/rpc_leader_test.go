package agent

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// countingJobs is a Jobs server that counts the calls it answers.
type countingJobs struct {
	pb.UnimplementedJobsServer
	registers, gets atomic.Int64
}

func (j *countingJobs) Register(context.Context, *pb.JobRegisterRequest) (*pb.JobRegisterResponse, error) {
	j.registers.Add(1)
	return &pb.JobRegisterResponse{}, nil
}

func (j *countingJobs) Get(context.Context, *pb.JobGetRequest) (*pb.JobGetResponse, error) {
	j.gets.Add(1)
	return &pb.JobGetResponse{}, nil
}

func serveJobs(t *testing.T) (string, *countingJobs) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	j := &countingJobs{}
	pb.RegisterJobsServer(s, j)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String(), j
}

type fakeLocator struct{ self, leader string }

func (f fakeLocator) RPCAddr() string            { return f.self }
func (f fakeLocator) OtherLeaderRPCAddr() string { return f.leader }

// A write the HTTP API sends to its own follower server goes to the leader
// directly, not through the follower's forward; reads, and every call while
// the local server leads (or knows no leader), stay on the local server.
func TestAgentWritesGoToTheLeaderDirectly(t *testing.T) {
	selfAddr, self := serveJobs(t)
	leaderAddr, leader := serveJobs(t)
	loc := fakeLocator{self: selfAddr, leader: leaderAddr}
	var pool *rpc.Pool
	pool = rpc.NewPool(grpc.WithChainUnaryInterceptor(leaderDirect(
		func() leaderLocator { return loc },
		func(addr string) (*grpc.ClientConn, error) { return pool.Conn(addr) })))
	t.Cleanup(pool.Close)
	conn, err := pool.Conn(selfAddr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	jobs := pb.NewJobsClient(conn)
	call := func() {
		t.Helper()
		if _, err := jobs.Register(ctx, &pb.JobRegisterRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := jobs.Get(ctx, &pb.JobGetRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	want := func(what string, selfRegs, leaderRegs, selfGets int64) {
		t.Helper()
		if self.registers.Load() != selfRegs || leader.registers.Load() != leaderRegs || self.gets.Load() != selfGets || leader.gets.Load() != 0 {
			t.Fatalf("%s: registers local %d, leader %d; gets local %d, leader %d; want %d, %d; %d, 0", what,
				self.registers.Load(), leader.registers.Load(), self.gets.Load(), leader.gets.Load(), selfRegs, leaderRegs, selfGets)
		}
	}
	call()
	want("local server follows", 0, 1, 1)

	loc.leader = "" // the local server leads, or knows no leader
	call()
	want("no other leader", 1, 1, 2)

	// A client-only agent (no local server) sends where it was told.
	var noServer *rpc.Pool
	noServer = rpc.NewPool(grpc.WithChainUnaryInterceptor(leaderDirect(
		func() leaderLocator { return nil },
		func(addr string) (*grpc.ClientConn, error) { return noServer.Conn(addr) })))
	t.Cleanup(noServer.Close)
	c2, err := noServer.Conn(selfAddr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewJobsClient(c2).Register(ctx, &pb.JobRegisterRequest{}); err != nil {
		t.Fatal(err)
	}
	want("no local server", 2, 1, 2)
}
