package sdk

import (
	"context"
	"iter"
	"sync"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk/driverpb"
)

// FingerprintHub holds a driver's current fingerprint and wakes watchers
// when it changes. Drivers keep one, Set it when health or attributes
// change, and return Watch from Fingerprint.
type FingerprintHub struct {
	mu      sync.Mutex
	cur     *driverpb.DriverFingerprint
	changed chan struct{}
}

// NewFingerprintHub returns a hub holding initial.
func NewFingerprintHub(initial *driverpb.DriverFingerprint) *FingerprintHub {
	return &FingerprintHub{cur: initial, changed: make(chan struct{})}
}

// Set replaces the fingerprint; watchers are woken only if it changed.
func (h *FingerprintHub) Set(fp *driverpb.DriverFingerprint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if proto.Equal(h.cur, fp) {
		return
	}
	h.cur = fp
	close(h.changed)
	h.changed = make(chan struct{})
}

// Current returns a copy of the current fingerprint.
func (h *FingerprintHub) Current() *driverpb.DriverFingerprint {
	h.mu.Lock()
	defer h.mu.Unlock()
	return proto.Clone(h.cur).(*driverpb.DriverFingerprint)
}

// Watch yields the current fingerprint, then the latest one after each
// change (intermediate values may be skipped), until ctx is done.
func (h *FingerprintHub) Watch(ctx context.Context) iter.Seq2[*driverpb.DriverFingerprint, error] {
	return func(yield func(*driverpb.DriverFingerprint, error) bool) {
		for {
			h.mu.Lock()
			fp, changed := proto.Clone(h.cur).(*driverpb.DriverFingerprint), h.changed
			h.mu.Unlock()
			if !yield(fp, nil) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}
}
