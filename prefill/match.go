package prefill

import "github.com/spillway-llm/spillway/profiles"

// Match is one request's prefix match against every endpoint, written by a
// prefix producer and read by filters, scorers, the in-flight producer and
// other packages (the P/D decider) through MatchOf.
type Match struct {
	Producer     string // name of the producer that computed it
	BlockSize    int
	TotalBlocks  int // blocks keyed (full blocks, capped by the match limits)
	PromptTokens int
	matched      []int32 // by Endpoint.Index
}

// Of returns an endpoint's match: leading blocks it caches, blocks keyed,
// and the tokens those blocks cover (never more than the prompt).
func (m *Match) Of(ep *profiles.Endpoint) (matchedBlocks, totalBlocks, matchedTokens int) {
	if m == nil || ep == nil {
		return 0, 0, 0
	}
	if ep.Index >= 0 && ep.Index < len(m.matched) {
		matchedBlocks = int(m.matched[ep.Index])
	}
	return matchedBlocks, m.TotalBlocks, min(matchedBlocks*m.BlockSize, m.PromptTokens)
}

// Fraction returns the endpoint's matched share of the keyed blocks, 0 when
// the prompt has no full block.
func (m *Match) Fraction(ep *profiles.Endpoint) float64 {
	mb, tb, _ := m.Of(ep)
	if tb == 0 {
		return 0
	}
	return float64(mb) / float64(tb)
}

// Uncached returns the prompt tokens the endpoint does not cache.
func (m *Match) Uncached(ep *profiles.Endpoint) int {
	_, _, mt := m.Of(ep)
	return m.PromptTokens - mt
}

// Any reports whether at least one endpoint matched one block.
func (m *Match) Any() bool {
	if m == nil {
		return false
	}
	for _, v := range m.matched {
		if v > 0 {
			return true
		}
	}
	return false
}

// matchKey is the request-state key of the default match (the last prefix
// producer to run); matchKeyOf(name) holds a named producer's.
const matchKey = "prefill/match"

func matchKeyOf(producer string) string { return matchKey + "/" + producer }

// Matches returns the request's prefix match from the last prefix producer
// that ran, or nil.
func Matches(req *profiles.Request) *Match {
	m, _ := req.Get(matchKey).(*Match)
	return m
}

// MatchesOf returns the match of a named prefix producer, or nil.
func MatchesOf(req *profiles.Request, producer string) *Match {
	m, _ := req.Get(matchKeyOf(producer)).(*Match)
	return m
}

// MatchOf returns how much of req's prompt ep caches according to the
// configured prefix producer: matched leading blocks, blocks keyed, and the
// tokens the matched blocks cover. All zero when no prefix producer ran.
func MatchOf(req *profiles.Request, ep *profiles.Endpoint) (matchedBlocks, totalBlocks, matchedTokens int) {
	return Matches(req).Of(ep)
}

func init() { profiles.RegisterPrefixMatch(MatchOf) }

// MatchOf implements profiles.PrefixMatcher with this producer's match.
func (a *ApproxProducer) MatchOf(req *profiles.Request, ep *profiles.Endpoint) (matchedBlocks, totalBlocks, matchedTokens int) {
	return MatchesOf(req, a.TN.Name).Of(ep)
}

// MatchOf implements profiles.PrefixMatcher with this producer's match.
func (pp *PreciseProducer) MatchOf(req *profiles.Request, ep *profiles.Endpoint) (matchedBlocks, totalBlocks, matchedTokens int) {
	return MatchesOf(req, pp.TN.Name).Of(ep)
}

var (
	_ profiles.PrefixMatcher = (*ApproxProducer)(nil)
	_ profiles.PrefixMatcher = (*PreciseProducer)(nil)
)

// storeMatch publishes a match under the producer's name and as default.
func storeMatch(req *profiles.Request, stateKey string, m *Match) {
	req.Put(stateKey, m)
	req.Put(matchKey, m)
}

// maxIndex returns the largest Endpoint.Index among eps.
func maxIndex(eps []*profiles.Endpoint) int {
	mx := -1
	for _, e := range eps {
		mx = max(mx, e.Index)
	}
	return mx
}
