package profiles

import (
	"context"
	"time"
)

// Plugin is anything built from the config file's plugins list.
type Plugin interface {
	// TypedName returns the plugin's type and its name in the config.
	TypedName() TypedName
}

// TypedName identifies a plugin instance.
type TypedName struct {
	Type string
	Name string
}

func (t TypedName) String() string {
	if t.Name == "" || t.Name == t.Type {
		return t.Type
	}
	return t.Name + "/" + t.Type
}

// Filter narrows the candidate endpoints. It must not modify eps; it returns
// a new slice (or eps itself when nothing is removed).
type Filter interface {
	Plugin
	Filter(ctx context.Context, cs *CycleState, req *Request, eps []*Endpoint) []*Endpoint
}

// Scorer writes a score in [0,1] for each endpoint into out (len(out) ==
// len(eps)). Scores are combined as a weighted sum per profile.
type Scorer interface {
	Plugin
	Score(ctx context.Context, cs *CycleState, req *Request, eps []*Endpoint, out []float64)
}

// Picker chooses from the scored candidates. It returns the endpoints in
// order of preference: the first is the target, the rest are fallbacks.
type Picker interface {
	Plugin
	Pick(ctx context.Context, cs *CycleState, req *Request, eps []*Endpoint, scores []float64) []*Endpoint
}

// ProfileHandler decides which profiles run for a request and assembles the
// result.
type ProfileHandler interface {
	Plugin
	Handle(ctx context.Context, req *Request, run ProfileRunner) (*Result, error)
}

// ProfileRunner lets a handler run the configured profiles.
type ProfileRunner interface {
	// Run runs the named profile over all candidate endpoints.
	Run(ctx context.Context, profile string, req *Request) (*ProfileResult, error)
	// Has reports whether a profile of that name is configured.
	Has(profile string) bool
	// Profiles returns the configured profile names in file order.
	Profiles() []string
}

// Producer prepares per-request data before the profiles run (token counts,
// prefix matches). Producers run in config order.
type Producer interface {
	Plugin
	Produce(ctx context.Context, req *Request, eps []*Endpoint) error
}

// Lifecycle hooks. The framework calls each at most once per request, in
// this order: Dispatch, FirstChunk, PrefillDone (P/D only, may come before
// FirstChunk), then exactly one of Finish or Fail. Finish and Fail imply
// the earlier hooks: a request that fails before its first chunk gets only
// Dispatch and Fail, and the hook must release everything it booked.

// DispatchHook books state when the request is sent to its endpoints.
type DispatchHook interface {
	OnDispatch(req *Request, res *Result)
}

// FirstChunkHook sees the first response chunk (end of prefill).
type FirstChunkHook interface {
	OnFirstChunk(req *Request, res *Result)
}

// PrefillDoneHook sees the end of a P/D request's remote prefill leg.
type PrefillDoneHook interface {
	OnPrefillDone(req *Request, res *Result)
}

// FinishHook sees a request that completed, with the usage its response
// reported (zero when none was reported).
type FinishHook interface {
	OnFinish(req *Request, res *Result, usage Usage)
}

// FailHook sees a request that failed or was cancelled.
type FailHook interface {
	OnFail(req *Request, res *Result, err error)
}

// EndpointsHook is told when endpoints join or leave the pool so producers
// can start watching them or drop their state.
type EndpointsHook interface {
	OnEndpointAdded(ep *Endpoint)
	OnEndpointRemoved(ep *Endpoint)
}

// Binder is implemented by plugins that refer to other plugins by name; Bind
// runs after every plugin in the file has been built.
type Binder interface {
	Bind(h Handle) error
}

// Describer is implemented by plugins that explain their resolved
// configuration beyond their parameters (e.g. the saturation threshold).
type Describer interface {
	Describe() []string
}

// Usage is what a response reported.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int
	Reported         bool          // the response carried a usage object
	TTFT             time.Duration // time from dispatch to first chunk, when known
}

// Clock tells time; the simulator provides a virtual one.
type Clock interface {
	Now() time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// WallClock is the real clock.
var WallClock Clock = wallClock{}
