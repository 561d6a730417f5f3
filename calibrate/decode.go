package calibrate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// DecodeOptions configure the decode-step measurement.
type DecodeOptions struct {
	Options
	// BatchSizes are the numbers of concurrent streams to measure
	// (default 1, 4, 16, 32); at least two distinct sizes.
	BatchSizes []int
	// PromptTokens per stream (default 1024: the context the step is
	// quoted at); OutputTokens per stream (default 64).
	PromptTokens int
	OutputTokens int
}

// BatchStep is the measured decode step time at one batch size.
type BatchStep struct {
	Batch int
	Step  time.Duration
	Gaps  int // inter-token gaps averaged
}

// DecodeMeasurement is the decode fit: step(b) = Base + PerSeq × b.
type DecodeMeasurement struct {
	Steps  []BatchStep
	Base   float64 // seconds
	PerSeq float64 // seconds per running sequence
	// PerSeq includes the KV reads of PromptTokens + ~OutputTokens/2 of
	// context per sequence: a longer context costs more per sequence.
	PromptTokens int
	OutputTokens int
}

// MeasureDecode runs B concurrent streams at each batch size, measures the
// inter-token time from the SSE chunks while all B streams are decoding,
// and fits step(b) = base + perSeq·b by least squares.
func MeasureDecode(ctx context.Context, o DecodeOptions) (*DecodeMeasurement, error) {
	if o.Endpoint == "" || o.Model == "" {
		return nil, errors.New("calibrate: endpoint and model are required")
	}
	if len(o.BatchSizes) == 0 {
		o.BatchSizes = []int{1, 4, 16, 32}
	}
	distinct := map[int]bool{}
	for _, b := range o.BatchSizes {
		if b < 1 || b > 1024 {
			return nil, fmt.Errorf("calibrate: batch sizes must be in [1, 1024], got %d", b)
		}
		distinct[b] = true
	}
	if len(distinct) < 2 {
		return nil, errors.New("calibrate: the decode fit needs at least two distinct batch sizes")
	}
	if o.PromptTokens == 0 {
		o.PromptTokens = 1024
	}
	if o.OutputTokens == 0 {
		o.OutputTokens = 64
	}
	if o.PromptTokens < 1 || o.PromptTokens > 1<<20 || o.OutputTokens < 8 || o.OutputTokens > 1<<16 {
		return nil, fmt.Errorf("calibrate: prompt tokens must be in [1, 1048576] and output tokens in [8, 65536], got %d and %d", o.PromptTokens, o.OutputTokens)
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	if !(o.TimeScale > 0) {
		return nil, fmt.Errorf("calibrate: time scale must be > 0, got %g", o.TimeScale)
	}
	if o.Timeout == 0 {
		o.Timeout = 120 * time.Second
	}
	if o.Client == nil {
		// Keep one connection per stream alive between batches, so that
		// dialing does not stagger the next batch's arrivals.
		o.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.API == "" {
		o.API = "completions"
	}
	if o.API != "completions" && o.API != "chat" {
		return nil, fmt.Errorf("calibrate: api must be completions or chat, got %q", o.API)
	}
	o.ChunkSize = o.PromptTokens
	c := &client{o: o.Options, base: strings.TrimRight(o.Endpoint, "/"), rng: rand.New(rand.NewPCG(o.Seed, 0xdec0de))}
	m := &DecodeMeasurement{PromptTokens: o.PromptTokens, OutputTokens: o.OutputTokens}
	ratio := 1.0
	for _, b := range o.BatchSizes {
		prompts := make([]string, b)
		for i := range prompts {
			p, _, _, err := c.exactPrompt(ctx, &ratio)
			if err != nil {
				return nil, err
			}
			prompts[i] = p
		}
		// Every stream of a batch sees the same steps; when their own
		// estimates disagree (a client that fell behind, streams that did
		// not overlap), measure the batch again with fresh prompts.
		var step time.Duration
		var gaps int
		var err error
		for attempt := 1; ; attempt++ {
			step, gaps, err = c.batchStep(ctx, prompts, o.OutputTokens)
			if err == nil || !errors.Is(err, errInconsistent) || attempt == maxBatchAttempts {
				break
			}
			if o.Log != nil {
				fmt.Fprintf(o.Log, "batch %3d  attempt %d discarded: %v\n", b, attempt, err)
			}
			for i := range prompts {
				if prompts[i], _, _, err = c.exactPrompt(ctx, &ratio); err != nil {
					return nil, err
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("calibrate: batch %d: %w", b, err)
		}
		step = time.Duration(float64(step) * o.TimeScale)
		m.Steps = append(m.Steps, BatchStep{Batch: b, Step: step, Gaps: gaps})
		if o.Log != nil {
			fmt.Fprintf(o.Log, "batch %3d  step %v (%d gaps)\n", b, step.Round(time.Microsecond), gaps)
		}
	}
	m.Base, m.PerSeq = fitLine(m.Steps)
	if !(m.Base > 0) {
		return nil, fmt.Errorf("calibrate: decode fit gave a non-positive base %gs (steps %v): the measurement is too noisy; use longer outputs", m.Base, m.Steps)
	}
	if m.PerSeq < 0 {
		m.PerSeq = 0 // batching for free within noise
	}
	return m, nil
}

// fitLine is ordinary least squares of step on batch size.
func fitLine(s []BatchStep) (base, slope float64) {
	var n, sx, sy, sxx, sxy float64
	for _, p := range s {
		x, y := float64(p.Batch), p.Step.Seconds()
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return sy / n, 0
	}
	slope = (n*sxy - sx*sy) / den
	return (sy - slope*sx) / n, slope
}

// maxBatchAttempts bounds the re-measurements of one batch size.
const maxBatchAttempts = 4

// errInconsistent marks a batch whose streams disagree on the step time.
var errInconsistent = errors.New("inconsistent measurement")

// maxStreamSpread is how far (max/min) the streams' own step estimates may
// differ: in one batch they share every step, so beyond jitter a larger
// spread means the client did not see the tokens when they were sent.
const maxStreamSpread = 1.15

// minStreamGaps is how many inter-token gaps each stream must contribute.
const minStreamGaps = 8

// batchStep starts every prompt as a stream at once and returns the mean
// inter-token gap over the window in which all streams were decoding (the
// latest first token to the earliest last token).
func (c *client) batchStep(ctx context.Context, prompts []string, out int) (time.Duration, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	times := make([][]time.Time, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			times[i], errs[i] = c.tokenTimes(ctx, p, out)
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, 0, err
		}
	}
	var lo, hi time.Time
	for i, ts := range times {
		if len(ts) < 2 {
			return 0, 0, fmt.Errorf("stream %d produced %d tokens", i, len(ts))
		}
		if i == 0 || ts[0].After(lo) {
			lo = ts[0]
		}
		if last := ts[len(ts)-1]; i == 0 || last.Before(hi) {
			hi = last
		}
	}
	// Per stream, the span between its first and last token inside the
	// window over the gaps between them; wall jitter only enters at the
	// span's two ends.
	var span time.Duration
	gaps := 0
	lowest, highest := math.Inf(1), 0.0
	for i, ts := range times {
		first, last, n := time.Time{}, time.Time{}, 0
		for _, t := range ts {
			if t.Before(lo) || t.After(hi) {
				continue
			}
			if n == 0 {
				first = t
			}
			last = t
			n++
		}
		if n-1 < minStreamGaps {
			return 0, 0, fmt.Errorf("%w: stream %d has %d inter-token gaps while all %d streams decoded (want ≥ %d; raise the output tokens)", errInconsistent, i, max(n-1, 0), len(prompts), minStreamGaps)
		}
		d := last.Sub(first)
		span += d
		gaps += n - 1
		est := d.Seconds() / float64(n-1)
		lowest, highest = math.Min(lowest, est), math.Max(highest, est)
	}
	if lowest <= 0 || highest/lowest > maxStreamSpread {
		return 0, 0, fmt.Errorf("%w: the streams' step estimates range %.2f–%.2f ms", errInconsistent, lowest*1e3, highest*1e3)
	}
	return span / time.Duration(gaps), gaps, nil
}

// tokenTimes streams one request and returns the arrival time of every
// chunk that carries a token.
func (c *client) tokenTimes(ctx context.Context, prompt string, out int) ([]time.Time, error) {
	var ts []time.Time
	_, err := c.stream(ctx, prompt, map[string]any{"max_tokens": out, "ignore_eos": true, "min_tokens": out},
		func(ch streamChunk, at time.Time) {
			if len(ch.Choices) > 0 {
				ts = append(ts, at)
			}
		})
	if err != nil {
		return nil, err
	}
	return ts, nil
}
