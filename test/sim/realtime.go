package sim

import (
	"sync"
	"time"
)

// RealEngine runs an Engine on the wall clock, optionally sped up: simulated
// time = epoch + (wall − start) × TimeScale. It is safe for concurrent use;
// callbacks run on the engine goroutine under its lock (do not block).
type RealEngine struct {
	*Engine
	mu     sync.Mutex
	cond   *sync.Cond
	start  time.Time
	scale  float64
	closed bool
	done   chan struct{}
	last   int64
	wakeAt int64 // simulated time work arrived at an idle engine
	// override pins now() while a timer callback runs at its exact
	// simulated time (-1: none), so timer latency does not leak into TTFT.
	override int64
}

type realDriver struct{ r *RealEngine }

func (d realDriver) now() int64 {
	if d.r.override >= 0 {
		return d.r.override
	}
	return int64(float64(time.Since(d.r.start)) * d.r.scale)
}
func (d realDriver) wake(*Engine) {
	d.r.wakeAt = d.now()
	d.r.cond.Signal()
}
func (d realDriver) reschedule(*Engine, int64) {}
func (d realDriver) after(ns int64, fn func()) {
	at := d.now() + ns
	time.AfterFunc(time.Until(d.r.start.Add(time.Duration(float64(at)/d.r.scale))), func() {
		d.r.mu.Lock()
		defer d.r.mu.Unlock()
		if !d.r.closed {
			d.r.override = at
			fn()
			d.r.override = -1
		}
	})
}

// NewRealEngine starts an engine goroutine on the wall clock. timeScale ≤ 0
// means 1 (real time); 10 runs ten simulated seconds per wall second.
func NewRealEngine(name string, p Profile, role Role, timeScale float64) *RealEngine {
	if timeScale <= 0 {
		timeScale = 1
	}
	r := &RealEngine{start: time.Now(), scale: timeScale, done: make(chan struct{}), override: -1}
	r.cond = sync.NewCond(&r.mu)
	r.Engine = newEngine(name, p, role, r.start, realDriver{r})
	go r.loop()
	return r
}

// TimeScale is the simulated-seconds-per-wall-second factor.
func (r *RealEngine) TimeScale() float64 { return r.scale }

// WallDuration converts a simulated duration to wall time.
func (r *RealEngine) WallDuration(d time.Duration) time.Duration {
	return time.Duration(float64(d) / r.scale)
}

func (r *RealEngine) loop() {
	defer close(r.done)
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for !r.busy && !r.closed {
			r.cond.Wait()
		}
		if r.closed {
			return
		}
		now := r.wakeAt
		if now < r.last {
			now = r.last
		}
		for {
			end, ok := r.startStep(now)
			if !ok {
				break
			}
			wall := r.start.Add(time.Duration(float64(end) / r.scale))
			r.mu.Unlock()
			time.Sleep(time.Until(wall))
			r.mu.Lock()
			if r.closed {
				return
			}
			r.apply(end)
			r.flushEvents(end)
			r.last, now = end, end
		}
	}
}

// Submit queues req now (simulated).
func (r *RealEngine) Submit(req *Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.submit(req)
}

// Snapshot reports live state.
func (r *RealEngine) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Engine.Snapshot()
}

// Release frees a held prefill leg's KV.
func (r *RealEngine) Release(req *Request) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Engine.Release(req)
}

// CachedPrefix reports the cached prefix length of prompt.
func (r *RealEngine) CachedPrefix(prompt []uint32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Engine.CachedPrefix(prompt, nil)
}

// Do runs fn under the engine lock (for anything else on *Engine).
func (r *RealEngine) Do(fn func(e *Engine)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r.Engine)
}

// SimNow is the current simulated time.
func (r *RealEngine) SimNow() time.Time {
	return r.start.Add(time.Duration(realDriver{r}.now()))
}

// Close stops the engine goroutine; queued requests never complete.
func (r *RealEngine) Close() {
	r.mu.Lock()
	r.closed = true
	r.cond.Broadcast()
	r.mu.Unlock()
	<-r.done
}
