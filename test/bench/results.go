package bench

// SchemaVersion is the results.json format version.
const SchemaVersion = 1

// Results is results.json. All times are milliseconds, rates per second of
// (virtual or wall) time. Fields are stable within a SchemaVersion.
type Results struct {
	SchemaVersion int            `json:"schemaVersion"`
	Mode          string         `json:"mode"` // "virtual" | "real"
	Seed          uint64         `json:"seed"`
	Workload      WorkloadInfo   `json:"workload"`
	Fleet         FleetInfo      `json:"fleet"`
	Baseline      string         `json:"baseline"` // configuration the ratios compare against
	Configs       []ConfigResult `json:"configs"`
}

// WorkloadInfo describes what was offered.
type WorkloadInfo struct {
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	ArrivalMode string    `json:"arrivalMode"` // poisson | bursty | closed
	LoadUnit    string    `json:"loadUnit"`    // "qps" (sessions/s) | "concurrency"
	Levels      []float64 `json:"levels"`
	Ramp        bool      `json:"ramp"`
	KneeMetric  string    `json:"kneeMetric"` // ttft_p90 | tpot_p90 | e2e_p90
	KneeBoundMs float64   `json:"kneeBoundMs"`
	SLO         SLOInfo   `json:"slo"`
}

// SLOInfo is the default SLO (classes may have their own).
type SLOInfo struct {
	TTFTMs float64 `json:"ttftMs"`
	TPOTMs float64 `json:"tpotMs"`
}

// FleetInfo describes the simulated deployment.
type FleetInfo struct {
	Name      string         `json:"name"`
	Endpoints int            `json:"endpoints"`
	Pools     map[string]int `json:"pools"` // role → count
}

// ConfigResult is one configuration's curve.
type ConfigResult struct {
	Name   string        `json:"name"`
	File   string        `json:"file"`
	Levels []LevelResult `json:"levels"`
	Knee   Knee          `json:"knee"`
	// GoodputFraction over every level: completed requests meeting their
	// SLO / requests offered, all levels together.
	GoodputFraction float64 `json:"goodputFraction"`
	// Predictor is the latency predictor's error over the run (configs
	// with a latency-predictor plugin only).
	Predictor *PredictorError `json:"predictor,omitempty"`
	Error     string          `json:"error,omitempty"` // the configuration could not run
}

// PredictorError is a latency predictor's mean absolute percentage error
// (fractions: 0.25 = 25%) of TTFT and TPOT over every response it observed
// during the configuration's runs, and the sample counts.
type PredictorError struct {
	TTFTMAPE    float64 `json:"ttftMape"`
	TPOTMAPE    float64 `json:"tpotMape"`
	TTFTSamples int     `json:"ttftSamples"`
	TPOTSamples int     `json:"tpotSamples"`
}

// LevelResult is one (configuration, load level).
type LevelResult struct {
	Load                float64        `json:"load"`
	Requests            int            `json:"requests"`
	Completed           int            `json:"completed"`
	Failed              int            `json:"failed"`
	TTFTMs              Percentiles    `json:"ttftMs"`
	TPOTMs              Percentiles    `json:"tpotMs"`
	E2EMs               Percentiles    `json:"e2eMs"`
	InputTokensPerSec   float64        `json:"inputTokensPerSec"`
	OutputTokensPerSec  float64        `json:"outputTokensPerSec"`
	GoodputFraction     float64        `json:"goodputFraction"` // completed requests meeting their SLO / requests
	GoodputPerSec       float64        `json:"goodputRequestsPerSec"`
	PrefixHitRate       float64        `json:"prefixHitRate"`       // cached prompt tokens / prompt tokens
	RequestsPerEndpoint map[string]int `json:"requestsPerEndpoint"` // destination endpoints (and prefill endpoints when disaggregated)
	Imbalance           float64        `json:"imbalance"`           // max / mean requests over the destination pool
	SaturationReleases  float64        `json:"saturationReleases"`  // affinity filter releases during the level
	DurationSeconds     float64        `json:"durationSeconds"`     // from level start to the level's last completion
}

// Percentiles of one latency.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
}

// Knee is where a configuration's operating range ends.
type Knee struct {
	// Index into Levels of the highest load before the knee metric first
	// crosses the bound; -1 when even the lowest level crosses it.
	Index int     `json:"index"`
	Load  float64 `json:"load"`
	// Reached is false when no level crossed the bound (the knee lies
	// beyond the highest level tried).
	Reached bool `json:"reached"`
	// Throughput at the knee: input tokens/s for TTFT and e2e knees, output
	// tokens/s for a TPOT knee.
	Throughput     float64 `json:"throughput"`
	ThroughputUnit string  `json:"throughputUnit"`
	// RatioVsBaseline is Throughput / the baseline's Throughput (0 when
	// either has no knee).
	RatioVsBaseline float64 `json:"ratioVsBaseline"`
}
