package costmodel

import (
	"context"
	"time"
)

// janitor calls sweep every ttl/4 (at most every minute) until ctx is done:
// the backstop that drops bookings of requests whose end was never seen.
// Lifecycle hooks are the mechanism; this only bounds a leak.
func janitor(ctx context.Context, ttl time.Duration, sweep func()) {
	if ttl <= 0 {
		return
	}
	t := time.NewTicker(min(ttl/4, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sweep()
		}
	}
}
