package csifake

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/status"
)

// Call scripts one RPC of the fake plugin and records how it was called.
// Req and Resp are the RPC's request and response message types. The zero
// value answers every call with an empty response.
type Call[Req, Resp any] struct {
	mu       sync.Mutex
	queue    []outcome[Resp]
	fallback outcome[Resp]
	delay    time.Duration
	gate     chan struct{}
	count    int
	requests []*Req
}

type outcome[Resp any] struct {
	resp *Resp
	err  error
}

// Next queues the answer for one future call: resp, or err when non-nil.
// Queued answers are used in order, before the Always answer.
func (c *Call[Req, Resp]) Next(resp *Resp, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, outcome[Resp]{resp, err})
}

// Always sets the answer given when nothing is queued. A nil resp and nil
// err answer with an empty response.
func (c *Call[Req, Resp]) Always(resp *Resp, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fallback = outcome[Resp]{resp, err}
}

// Delay makes every call wait d before answering, or until the caller's
// deadline, which it then answers with the context's gRPC status.
func (c *Call[Req, Resp]) Delay(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delay = d
}

// Block makes calls hang, like a wedged plugin, until release is called or
// the caller's deadline passes. Calls already waiting and calls made before
// release all wait; release lets them all go and stops the blocking.
func (c *Call[Req, Resp]) Block() (release func()) {
	gate := make(chan struct{})
	c.mu.Lock()
	c.gate = gate
	c.mu.Unlock()
	return sync.OnceFunc(func() {
		c.mu.Lock()
		if c.gate == gate {
			c.gate = nil
		}
		c.mu.Unlock()
		close(gate)
	})
}

// Count returns how many calls arrived, including ones still waiting.
func (c *Call[Req, Resp]) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

// Last returns the latest request, nil before the first call.
func (c *Call[Req, Resp]) Last() *Req {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.requests) == 0 {
		return nil
	}
	return c.requests[len(c.requests)-1]
}

// Requests returns every request received, oldest first.
func (c *Call[Req, Resp]) Requests() []*Req {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Req(nil), c.requests...)
}

// serve records req and answers it as scripted.
func (c *Call[Req, Resp]) serve(ctx context.Context, req *Req) (*Resp, error) {
	c.mu.Lock()
	c.count++
	c.requests = append(c.requests, req)
	o := c.fallback
	if len(c.queue) > 0 {
		o = c.queue[0]
		c.queue = c.queue[1:]
	}
	delay, gate := c.delay, c.gate
	c.mu.Unlock()

	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	switch {
	case o.err != nil:
		return nil, o.err
	case o.resp == nil:
		return new(Resp), nil
	}
	return o.resp, nil
}
