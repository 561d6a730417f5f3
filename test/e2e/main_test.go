package e2e

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package when goroutines outlive the tests: every
// server, sidecar, stack, ZMQ subscriber and stream the tests start must
// stop with them. One exception, outside spillway: go-zeromq/zmq4 v0.17.0
// never stops a PUB socket's writer goroutine (socket.Close does not close
// its pubMWriter), one per simulator KV-events publisher.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		client.CloseIdleConnections()
		var left []string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if left = leaked(); len(left) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(left) > 0 {
			fmt.Fprintf(os.Stderr, "%d goroutines outlived the tests:\n%s\n", len(left), strings.Join(left, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// leaked returns the stacks of goroutines other than the test runtime's
// own and zmq4's PUB writers.
func leaked() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		switch {
		case strings.Contains(g, "testing.(*M)"), strings.Contains(g, "e2e.TestMain"),
			strings.Contains(g, "zmq4.(*pubMWriter).run"),
			strings.Contains(g, "runtime.goexit") && !strings.Contains(g, "created by"):
			continue
		}
		out = append(out, g)
	}
	return out
}
