package sdk

import (
	"context"
	"iter"
	"maps"
	"sync"
	"time"

	"berth.dev/berth/sdk/driverpb"
)

// eventBuffer is how many events a subscriber may fall behind before it
// misses some.
const eventBuffer = 256

// EventHub fans task events out to TaskEvents subscribers. Drivers embed one
// and return Subscribe from TaskEvents. The zero value is ready to use.
type EventHub struct {
	mu   sync.Mutex
	subs map[chan *driverpb.TaskEvent]struct{}
}

// Emit publishes an event for taskID stamped with the current time.
func (h *EventHub) Emit(taskID, message string, annotations map[string]string) {
	h.Publish(&driverpb.TaskEvent{
		TaskId:      taskID,
		Timestamp:   time.Now().UnixNano(),
		Message:     message,
		Annotations: maps.Clone(annotations),
	})
}

// Publish delivers ev to every subscriber without blocking; a subscriber
// more than a buffer behind misses it.
func (h *EventHub) Publish(ev *driverpb.TaskEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// Subscribe registers a subscriber at once (events published after it
// returns are delivered) and yields them until ctx is done. Cancel ctx to
// release a subscription that is never iterated.
func (h *EventHub) Subscribe(ctx context.Context) iter.Seq2[*driverpb.TaskEvent, error] {
	ch := make(chan *driverpb.TaskEvent, eventBuffer)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[chan *driverpb.TaskEvent]struct{}{}
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	})
	return func(yield func(*driverpb.TaskEvent, error) bool) {
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-ch:
				if !yield(ev, nil) {
					return
				}
			}
		}
	}
}
