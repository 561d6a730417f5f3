package prefill

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Calibration is the saturation release's arithmetic, in one place:
//
//	τ = peakPrefillThroughput × maxTTFTPenaltyMs / 1000   (tokens)
//	K = τ / B                                             (chunks of max-num-batched-tokens)
//
// τ is the lead in uncached in-flight tokens a warm endpoint may have over
// the best cold one before stickiness breaks; at peak throughput it drains
// in maxTTFTPenaltyMs.
type Calibration struct {
	PeakPrefillThroughput float64 // tokens/s; 0 when τ was given directly
	MaxTTFTPenaltyMs      float64 // 0 = never release (time form)
	TauTokens             float64 // τ
	ChunkSize             int     // B, for display
	Source                string  // where the throughput came from
}

// NewCalibration derives τ from the time form.
func NewCalibration(peak, maxTTFTPenaltyMs float64, chunk int) Calibration {
	return Calibration{PeakPrefillThroughput: peak, MaxTTFTPenaltyMs: maxTTFTPenaltyMs, TauTokens: Tau(peak, maxTTFTPenaltyMs), ChunkSize: chunk}
}

// Tau is τ = peak × ms / 1000.
func Tau(peakPrefillThroughput, maxTTFTPenaltyMs float64) float64 {
	return peakPrefillThroughput * maxTTFTPenaltyMs / 1000
}

// Chunks is K = τ / B.
func Chunks(tau float64, chunk int) float64 {
	if chunk <= 0 {
		return 0
	}
	return tau / float64(chunk)
}

// Never reports whether the release can never fire (maxTTFTPenaltyMs 0).
func (c Calibration) Never() bool { return c.TauTokens <= 0 }

// Releases reports whether an in-flight token gap (best sticky − best
// non-sticky) breaks stickiness: strictly more than τ.
func (c Calibration) Releases(gapTokens float64) bool {
	return !c.Never() && gapTokens > c.TauTokens
}

// GapMs converts a token gap to milliseconds of prefill at peak
// throughput (0 when the throughput is unknown).
func (c Calibration) GapMs(gapTokens float64) float64 {
	if c.PeakPrefillThroughput <= 0 {
		return 0
	}
	return gapTokens / c.PeakPrefillThroughput * 1000
}

// Describe renders e.g. "τ = 286,720 tokens = 35 chunks of 8192 ≈ 14.0 s
// at 20,480 tok/s".
func (c Calibration) Describe() string {
	if c.Never() {
		return "saturation release off (maxTTFTPenaltyMs 0): sticky endpoints are never released"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "τ = %s tokens", group(c.TauTokens))
	if c.ChunkSize > 0 {
		k := Chunks(c.TauTokens, c.ChunkSize)
		ks := strconv.FormatFloat(k, 'f', 1, 64)
		if k == math.Trunc(k) {
			ks = strconv.FormatFloat(k, 'f', 0, 64)
		}
		fmt.Fprintf(&b, " = %s chunks of %d", ks, c.ChunkSize)
	}
	if c.PeakPrefillThroughput > 0 {
		fmt.Fprintf(&b, " ≈ %.1f s at %s tok/s", c.TauTokens/c.PeakPrefillThroughput, group(c.PeakPrefillThroughput))
	}
	if c.Source != "" {
		b.WriteString(" (" + c.Source + ")")
	}
	return b.String()
}

// group formats a number with thousands separators ("286,720"); fractions
// are rounded to one decimal.
func group(v float64) string {
	s := strconv.FormatFloat(math.Abs(v), 'f', -1, 64)
	if v != math.Trunc(v) {
		s = strconv.FormatFloat(math.Abs(v), 'f', 1, 64)
	}
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return b.String()
}
