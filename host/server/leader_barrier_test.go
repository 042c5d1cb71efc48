package server

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// unanswered is a raft future raft never answers: what a future handed to
// raft's FSM goroutine becomes when raft shuts down first.
type unanswered struct{ never chan struct{} }

func (u unanswered) Error() error { <-u.never; return nil }

// answered is a future answered at once with err.
type answered struct{ err error }

func (a answered) Error() error { return a.err }

func TestBarrierEndsWithItsContextWhenRaftNeverAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		never := make(chan struct{})
		defer close(never)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan bool)
		go func() {
			done <- awaitBarrier(ctx, func() raft.Future { return unanswered{never} }, hclog.NewNullLogger())
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("the barrier returned before raft answered or ctx ended")
		default:
		}
		cancel()
		if ok := <-done; ok {
			t.Fatal("a barrier whose ctx ended reported it passed")
		}
	})
}

func TestBarrierRetriesAFailedTryUntilOnePasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tries := 0
		ok := awaitBarrier(t.Context(), func() raft.Future {
			tries++
			if tries < 3 {
				return answered{errors.New("enqueue timed out")}
			}
			return answered{}
		}, hclog.NewNullLogger())
		if !ok || tries != 3 {
			t.Fatalf("barrier: %v after %d tries, want true after 3", ok, tries)
		}
	})
}
