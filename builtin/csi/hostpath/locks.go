//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
)

// keyedLocks serializes operations per key (a volume, snapshot or name):
// calls on one volume run one after the other, calls on different volumes in
// parallel. Waiting honours the caller's context.
type keyedLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	sem  chan struct{}
	refs int
}

func newKeyedLocks() *keyedLocks { return &keyedLocks{m: map[string]*keyLock{}} }

// lock takes the lock for key and returns its release function. If ctx ends
// first it returns the context's status (DeadlineExceeded or Canceled),
// naming what it waited for.
func (k *keyedLocks) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	l := k.m[key]
	if l == nil {
		l = &keyLock{sem: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()

	select {
	case l.sem <- struct{}{}:
		return func() {
			<-l.sem
			k.release(key, l)
		}, nil
	case <-ctx.Done():
		k.release(key, l)
		st := status.FromContextError(ctx.Err())
		return nil, status.Errorf(st.Code(), "waiting for another operation on %s: %v", key, ctx.Err())
	}
}

func (k *keyedLocks) release(key string, l *keyLock) {
	k.mu.Lock()
	l.refs--
	if l.refs == 0 {
		delete(k.m, key)
	}
	k.mu.Unlock()
}

// lockAll takes several keys in a fixed (sorted, deduplicated) order so two
// callers wanting overlapping sets cannot deadlock.
func (k *keyedLocks) lockAll(ctx context.Context, keys []string) (func(), error) {
	sorted := dedupSorted(keys)
	var releases []func()
	unlockAll := func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	for _, key := range sorted {
		rel, err := k.lock(ctx, key)
		if err != nil {
			unlockAll()
			return nil, err
		}
		releases = append(releases, rel)
	}
	return unlockAll, nil
}

// ErrStateDirInUse is returned by Run and Start when another plugin process
// already serves the same controller state or node ID in the state directory.
var ErrStateDirInUse = errcode.New(codes.FailedPrecondition, "state directory in use by another hostpath plugin")

// fileLock is an exclusive flock(2) held for the life of the process role.
type fileLock struct{ f *os.File }

func acquireFileLock(path, what string) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (lock %s is held)", ErrStateDirInUse, what, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &fileLock{f: f}, nil
}

func (l *fileLock) release() {
	if l != nil && l.f != nil {
		l.f.Close() // closing the descriptor drops the flock
		l.f = nil
	}
}
