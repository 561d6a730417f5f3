package calibrate

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// tester is the part of *testing.T the wall-clock tests use.
type tester interface {
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Log(args ...any)
	Logf(format string, args ...any)
	Helper()
}

// attempt collects one try's failures instead of failing the test.
type attempt struct {
	*testing.T
	mu   sync.Mutex
	errs []string
}

func (a *attempt) Errorf(format string, args ...any) {
	a.mu.Lock()
	a.errs = append(a.errs, fmt.Sprintf(format, args...))
	a.mu.Unlock()
}
func (a *attempt) Fatalf(format string, args ...any) { a.Errorf(format, args...); runtime.Goexit() }
func (a *attempt) Fatal(args ...any)                 { a.Errorf("%s", fmt.Sprint(args...)); runtime.Goexit() }

// retryWallClock runs f up to three times. The simulator steps on the wall
// clock, so a loaded machine (CI runs packages in parallel on 2 cores) can
// stretch one measurement; the assertions must hold on one try.
func retryWallClock(t *testing.T, f func(tester)) {
	var last []string
	for i := 1; i <= 3; i++ {
		a := &attempt{T: t}
		done := make(chan struct{})
		go func() { defer close(done); f(a) }()
		<-done
		if len(a.errs) == 0 {
			return
		}
		last = a.errs
		t.Logf("attempt %d failed: %s", i, strings.Join(a.errs, "; "))
	}
	t.Fatalf("failed on every attempt; last: %s", strings.Join(last, "; "))
}
