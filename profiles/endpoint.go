package profiles

import (
	"sync"
	"sync/atomic"
	"time"
)

// RoleLabel is the pod label that carries an endpoint's disaggregation role.
const RoleLabel = "llm-d.ai/role"

// Roles, as llm-d labels pods.
const (
	RoleEncode              = "encode"
	RolePrefill             = "prefill"
	RoleDecode              = "decode"
	RoleBoth                = "both"
	RolePrefillDecode       = "prefill-decode"
	RoleEncodePrefill       = "encode-prefill"
	RoleEncodePrefillDecode = "encode-prefill-decode"
)

// Metrics is one scrape of an endpoint's engine metrics. A Metrics value is
// immutable once published on an endpoint.
type Metrics struct {
	WaitingQueue  int     // vllm:num_requests_waiting
	Running       int     // vllm:num_requests_running
	KVUsage       float64 // vllm:kv_cache_usage_perc, 0..1
	BlockSize     int     // vllm:cache_config_info{block_size}; 0 = unknown
	NumGPUBlocks  int     // vllm:cache_config_info{num_gpu_blocks}; 0 = unknown
	PrefixQueries float64 // vllm:prefix_cache_queries_total
	PrefixHits    float64 // vllm:prefix_cache_hits_total
	RunningLoRAs  []string
	WaitingLoRAs  []string
	MaxLoRA       int
	UpdatedAt     time.Time // when the scrape completed
	Stale         bool      // the last scrape failed or is too old
	Err           string    // why it is stale
}

// Endpoint is a read-only view of one model-server endpoint shared by all
// requests. Its identity fields never change; metrics and producer
// attributes are swapped atomically.
type Endpoint struct {
	// Index is a small integer unique among live endpoints of one store; it
	// lets producers keep per-endpoint state in slices.
	Index   int
	Name    string
	Address string // host:port
	Role    string // value of RoleLabel, "" when unlabelled
	Labels  map[string]string

	metrics atomic.Pointer[Metrics]
	attrs   sync.Map // producer attributes, key string
}

// NewEndpoint builds an endpoint view. labels is retained, not copied.
func NewEndpoint(index int, name, address string, labels map[string]string) *Endpoint {
	if labels == nil {
		labels = map[string]string{}
	}
	return &Endpoint{Index: index, Name: name, Address: address, Role: labels[RoleLabel], Labels: labels}
}

// Metrics returns the latest scrape, or a zero, stale Metrics when none has
// completed yet.
func (e *Endpoint) Metrics() *Metrics {
	if m := e.metrics.Load(); m != nil {
		return m
	}
	return &noMetrics
}

var noMetrics = Metrics{Stale: true, Err: "not scraped yet"}

// scrapeFailing reports whether a scrape was attempted and the metrics are
// stale (as opposed to not scraped yet).
func (e *Endpoint) scrapeFailing() bool {
	m := e.metrics.Load()
	return m != nil && m.Stale
}

// SetMetrics publishes a new scrape. Callers must not modify m afterwards.
func (e *Endpoint) SetMetrics(m *Metrics) { e.metrics.Store(m) }

// Attr returns a producer attribute.
func (e *Endpoint) Attr(key string) (any, bool) { return e.attrs.Load(key) }

// SetAttr publishes a producer attribute.
func (e *Endpoint) SetAttr(key string, v any) { e.attrs.Store(key, v) }

// String returns the endpoint's name and address.
func (e *Endpoint) String() string { return e.Name + "(" + e.Address + ")" }

// HasRole reports whether the endpoint's role is one of roles. The empty
// role matches "" only.
func (e *Endpoint) HasRole(roles ...string) bool {
	for _, r := range roles {
		if e.Role == r {
			return true
		}
	}
	return false
}

// Role sets accepted by the role filters (protocols.md §2).
var (
	DecodeRoles  = []string{RoleDecode, RoleBoth, RolePrefillDecode, RoleEncodePrefillDecode, ""}
	PrefillRoles = []string{RolePrefill, RoleBoth, RolePrefillDecode, RoleEncodePrefill, RoleEncodePrefillDecode}
	EncodeRoles  = []string{RoleEncode, RoleEncodePrefill, RoleEncodePrefillDecode}
)
