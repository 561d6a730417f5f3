package director

import (
	"strings"
	"sync"
	"time"

	"github.com/spillway-llm/spillway/profiles"
)

// Exchange is one dispatched request: where it goes, and the observer of its
// response. Its methods are safe for concurrent use; every lifecycle hook
// and metric fires at most once however often the front door reports an
// end of stream.
type Exchange struct {
	d       *Director
	Req     *profiles.Request
	Result  *profiles.Result
	tracker *profiles.Tracker
	start   time.Time

	body      []byte
	rewritten bool
	dest      string

	mu     sync.Mutex
	status int
	served string
	first  bool
	done   bool
	resp   responseParser
}

// Destination is the x-gateway-destination-endpoint value: primary first,
// then fallbacks.
func (x *Exchange) Destination() string { return x.dest }

// Targets returns the destination addresses in order of preference.
func (x *Exchange) Targets() []string {
	d := x.Result.Destination()
	out := make([]string, len(d))
	for i, e := range d {
		out[i] = e.Address
	}
	return out
}

// RoutingHeaders returns the headers to set on the upstream request besides
// the destination (x-prefiller-host-port, x-encoder-hosts-ports). Do not
// modify the map.
func (x *Exchange) RoutingHeaders() map[string]string { return x.Result.Headers }

// Body returns the body to send upstream and whether it differs from the
// client's body (then Content-Length must be set to its length).
func (x *Exchange) Body() ([]byte, bool) { return x.body, x.rewritten }

// Tracker returns the request's lifecycle tracker.
func (x *Exchange) Tracker() *profiles.Tracker { return x.tracker }

// DebugHeader returns the x-spillway-decision value, or "" when the client
// did not ask for a trace.
func (x *Exchange) DebugHeader() string {
	if !x.Req.Debug() {
		return ""
	}
	var b strings.Builder
	b.WriteString("destination=")
	b.WriteString(x.dest)
	for k, v := range x.Result.Headers {
		b.WriteString("; ")
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
	}
	if x.Result.Decision != "" {
		b.WriteString("; decision=")
		b.WriteString(x.Result.Decision)
	}
	if x.Result.Reason != "" {
		b.WriteString("; reason=")
		b.WriteString(x.Result.Reason)
	}
	for _, t := range x.Req.Trace() {
		b.WriteString("; ")
		b.WriteString(t.Profile)
		b.WriteByte('/')
		b.WriteString(t.Plugin)
		b.WriteString(": ")
		b.WriteString(t.Text)
	}
	return headerSafe(b.String())
}

// headerSafe drops bytes that may not appear in a header value.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// SetServed records which endpoint really served the request (Envoy's
// envoy.lb served metadata, or the gateway's successful target).
// When a fallback served, the request's bookings move to it.
func (x *Exchange) SetServed(addr string) {
	x.mu.Lock()
	x.served = addr
	x.mu.Unlock()
	if x.tracker != nil && addr != "" {
		x.tracker.Retarget(addr)
	}
}

// Served returns the endpoint that served the request, "" when unknown.
func (x *Exchange) Served() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.served
}

// ResponseHeaders observes the upstream response's status and headers; get
// returns a header by lower-case name ("" when absent).
func (x *Exchange) ResponseHeaders(status int, get func(name string) string) {
	x.mu.Lock()
	if x.done {
		x.mu.Unlock()
		return
	}
	x.status = status
	ct := strings.ToLower(get("content-type"))
	x.resp.sse = strings.HasPrefix(ct, "text/event-stream") || (ct == "" && x.Req.Stream)
	prefill := get(HeaderPrefillDoneMs) != ""
	x.mu.Unlock()
	if prefill {
		x.tracker.PrefillDone()
	}
}

// ResponseBody observes one response body chunk; endOfStream ends the
// request (Finish with the usage found, or Fail for an error status).
// Chunks after the end are ignored.
func (x *Exchange) ResponseBody(chunk []byte, endOfStream bool) {
	x.mu.Lock()
	if x.done {
		x.mu.Unlock()
		return
	}
	firstNow := false
	if len(chunk) > 0 {
		if !x.first {
			x.first, firstNow = true, true
		}
		x.resp.feed(chunk)
	}
	x.mu.Unlock()
	if firstNow {
		x.d.m.ttft.Observe(time.Since(x.start).Seconds())
		x.tracker.FirstChunk()
	}
	if endOfStream {
		x.end()
	}
}

// end finishes the request once.
func (x *Exchange) end() {
	x.mu.Lock()
	if x.done {
		x.mu.Unlock()
		return
	}
	x.done = true
	status := x.status
	if status == 0 {
		status = 200
	}
	u := x.resp.finish()
	x.mu.Unlock()
	x.d.m.inflight.Dec()
	x.d.m.duration.Observe(time.Since(x.start).Seconds())
	x.d.m.observe(status)
	if status >= 400 {
		x.tracker.Fail(&profiles.StatusError{Code: status, Message: "upstream answered with an error status"})
		return
	}
	x.tracker.Finish(u)
}

// Fail ends the request as failed or cancelled: code is what the client got
// (499 when it went away). A request already ended is left alone.
func (x *Exchange) Fail(code int, err error) {
	x.mu.Lock()
	if x.done {
		x.mu.Unlock()
		return
	}
	x.done = true
	x.mu.Unlock()
	x.d.m.inflight.Dec()
	x.d.m.duration.Observe(time.Since(x.start).Seconds())
	x.d.m.observe(code)
	x.tracker.Fail(err)
}

// Done reports whether the request has ended.
func (x *Exchange) Done() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.done
}

// Usage returns the usage found in the response so far.
func (x *Exchange) Usage() profiles.Usage {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.resp.usage
}
