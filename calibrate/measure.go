package calibrate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Options configure a measurement.
type Options struct {
	Endpoint  string // base URL, e.g. http://127.0.0.1:8000
	Model     string
	ChunkSize int // B, tokens
	Warmups   int // discarded requests (default 3)
	Samples   int // measured requests (default 10)
	// API is "completions" (default; no chat template tokens) or "chat".
	API     string
	Timeout time.Duration // per request (default 120 s)
	Seed    uint64        // prompt randomness (0 = time-based)
	Client  *http.Client
	// Log receives one line per request (nil = quiet).
	Log io.Writer
	// TimeScale multiplies measured wall times back into the server's
	// time: 1 (default) for real engines; s for a simulator run with
	// --time-scale s.
	TimeScale float64
}

// Measurement is the outcome.
type Measurement struct {
	ChunkSize             int
	PromptTokens          int             // verified prompt length
	LengthSource          string          // "tokenize" | "usage" | "unverified"
	TTFTs                 []time.Duration // measured samples, in order
	MedianTTFT            time.Duration
	PeakPrefillThroughput float64 // tokens/s
}

// Tau is the saturation threshold for a TTFT ceiling: R_peak × T_max.
func (m *Measurement) Tau(tmax time.Duration) float64 {
	return m.PeakPrefillThroughput * tmax.Seconds()
}

// Measure runs the calibration.
func Measure(ctx context.Context, o Options) (*Measurement, error) {
	if o.Endpoint == "" || o.Model == "" {
		return nil, errors.New("calibrate: endpoint and model are required")
	}
	if o.ChunkSize < 16 || o.ChunkSize > 1<<20 {
		return nil, fmt.Errorf("calibrate: chunk size must be in [16, 1048576], got %d", o.ChunkSize)
	}
	if o.Warmups == 0 {
		o.Warmups = 3
	}
	if o.Samples == 0 {
		o.Samples = 10
	}
	if o.Warmups < 0 || o.Samples < 1 || o.Samples > 1000 || o.Warmups > 100 {
		return nil, fmt.Errorf("calibrate: need 0–100 warm-ups and 1–1000 samples")
	}
	if o.API == "" {
		o.API = "completions"
	}
	if o.API != "completions" && o.API != "chat" {
		return nil, fmt.Errorf("calibrate: api must be completions or chat, got %q", o.API)
	}
	if o.Timeout == 0 {
		o.Timeout = 120 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	if !(o.TimeScale > 0) {
		return nil, fmt.Errorf("calibrate: time scale must be > 0, got %g", o.TimeScale)
	}
	c := &client{o: o, base: strings.TrimRight(o.Endpoint, "/"), rng: rand.New(rand.NewPCG(o.Seed, 0x5eed))}
	m := &Measurement{ChunkSize: o.ChunkSize, LengthSource: "unverified"}
	// Words per token differ per tokenizer: learn the ratio from the first
	// prompt, then every prompt is built and checked to be exactly B.
	ratio := 1.0
	for i := range o.Warmups + o.Samples {
		prompt, n, src, err := c.exactPrompt(ctx, &ratio)
		if err != nil {
			return nil, err
		}
		ttft, usage, err := c.firstToken(ctx, prompt)
		if err != nil {
			return nil, fmt.Errorf("calibrate: request %d: %w", i+1, err)
		}
		ttft = time.Duration(float64(ttft) * o.TimeScale)
		if src == "unverified" && usage > 0 {
			n, src = usage, "usage"
		}
		if src != "unverified" && n != o.ChunkSize && src == "tokenize" {
			return nil, fmt.Errorf("calibrate: prompt is %d tokens, not %d", n, o.ChunkSize)
		}
		m.PromptTokens, m.LengthSource = n, src
		kind := "warm-up"
		if i >= o.Warmups {
			kind = "sample"
			m.TTFTs = append(m.TTFTs, ttft)
		}
		if o.Log != nil {
			fmt.Fprintf(o.Log, "%-7s %2d  prompt %d tokens (%s)  TTFT %v\n", kind, i+1, n, src, ttft.Round(time.Microsecond))
		}
	}
	if m.LengthSource == "usage" && m.PromptTokens != o.ChunkSize {
		return nil, fmt.Errorf("calibrate: the server counted %d prompt tokens, not %d, and has no /tokenize to build exact prompts", m.PromptTokens, o.ChunkSize)
	}
	sorted := append([]time.Duration(nil), m.TTFTs...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a] < sorted[b] })
	k := len(sorted)
	if k%2 == 1 {
		m.MedianTTFT = sorted[k/2]
	} else {
		m.MedianTTFT = (sorted[k/2-1] + sorted[k/2]) / 2
	}
	if m.MedianTTFT <= 0 {
		return nil, errors.New("calibrate: median TTFT is zero")
	}
	m.PeakPrefillThroughput = float64(o.ChunkSize) / m.MedianTTFT.Seconds()
	return m, nil
}

type client struct {
	o          Options
	base       string
	rng        *rand.Rand
	noTokenize bool
}

// word returns a random lower-case word: unique enough that no two prompts
// share a prefix block.
func (c *client) word() string {
	const letters = "abcdefghijklmnopqrstuvwxyz"
	var b [6]byte
	for i := range b {
		b[i] = letters[c.rng.IntN(len(letters))]
	}
	return string(b[:])
}

// exactPrompt builds a random prompt of exactly ChunkSize tokens as counted
// by /tokenize (when available). ratio is words per token, learned.
func (c *client) exactPrompt(ctx context.Context, ratio *float64) (string, int, string, error) {
	want := c.o.ChunkSize
	words := make([]string, 0, int(float64(want)**ratio)+16)
	for range int(float64(want) * *ratio) {
		words = append(words, c.word())
	}
	if c.noTokenize {
		return strings.Join(words, " "), len(words), "unverified", nil
	}
	for range 12 {
		text := strings.Join(words, " ")
		n, err := c.tokenize(ctx, text)
		if errors.Is(err, errNoTokenize) {
			c.noTokenize = true
			return text, len(words), "unverified", nil
		}
		if err != nil {
			return "", 0, "", err
		}
		if n == want {
			if len(words) > 0 {
				*ratio = float64(len(words)) / float64(n)
			}
			return text, n, "tokenize", nil
		}
		// Adjust by the estimated number of words; near the target add or
		// drop one short word at a time.
		per := float64(len(words)) / float64(max(n, 1))
		d := int(float64(want-n) * per)
		switch {
		case d == 0 && n < want:
			words = append(words, "a")
		case d == 0 && n > want && len(words) > 0:
			words = words[:len(words)-1]
		case d > 0:
			for range d {
				words = append(words, c.word())
			}
		default:
			words = words[:max(len(words)+d, 0)]
		}
	}
	return "", 0, "", fmt.Errorf("calibrate: could not build a prompt of exactly %d tokens with /tokenize", want)
}

var errNoTokenize = errors.New("no /tokenize endpoint")

func (c *client) tokenize(ctx context.Context, text string) (int, error) {
	body := map[string]any{"model": c.o.Model, "prompt": text}
	if c.o.API == "chat" {
		body = map[string]any{"model": c.o.Model, "messages": []map[string]string{{"role": "user", "content": text}}}
	}
	js, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/tokenize", bytes.NewReader(js))
	if err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.o.Client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("calibrate: /tokenize: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		return 0, errNoTokenize
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("calibrate: /tokenize answered %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var out struct {
		Count  *int              `json:"count"`
		Tokens []json.RawMessage `json:"tokens"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&out); err != nil {
		return 0, fmt.Errorf("calibrate: /tokenize response: %w", err)
	}
	if out.Count != nil {
		return *out.Count, nil
	}
	return len(out.Tokens), nil
}

// firstToken sends one streaming request and returns the time to the first
// content chunk, and the prompt tokens the usage reported (0 if none).
func (c *client) firstToken(ctx context.Context, prompt string) (time.Duration, int, error) {
	var first time.Time
	usage := 0
	start, err := c.stream(ctx, prompt, map[string]any{"max_tokens": 1, "stream_options": map[string]bool{"include_usage": true}},
		func(ch streamChunk, at time.Time) {
			if first.IsZero() && len(ch.Choices) > 0 {
				first = at
			}
			if ch.Usage != nil {
				usage = ch.Usage.PromptTokens
			}
		})
	if err != nil {
		return 0, 0, err
	}
	if first.IsZero() {
		return 0, 0, errors.New("stream ended without a token")
	}
	return first.Sub(start), usage, nil
}

// streamChunk is the part of an SSE data event calibrate reads.
type streamChunk struct {
	Choices []json.RawMessage `json:"choices"`
	Usage   *struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

// stream sends one streaming completion (chat with --api chat) for prompt,
// with extra body fields, and calls on for every data event with its
// arrival time. It returns when the request was sent.
func (c *client) stream(ctx context.Context, prompt string, extra map[string]any, on func(streamChunk, time.Time)) (time.Time, error) {
	body := map[string]any{"model": c.o.Model, "stream": true, "temperature": 0}
	for k, v := range extra {
		body[k] = v
	}
	path := "/v1/completions"
	if c.o.API == "chat" {
		path = "/v1/chat/completions"
		body["messages"] = []map[string]string{{"role": "user", "content": prompt}}
	} else {
		body["prompt"] = prompt
	}
	js, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(js))
	if err != nil {
		return time.Time{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.o.Client.Do(req)
	if err != nil {
		return start, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return start, fmt.Errorf("%s answered %d: %s", path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		data := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		if data == "[DONE]" {
			break
		}
		var ch streamChunk
		if json.Unmarshal([]byte(data), &ch) == nil {
			on(ch, time.Now())
		}
	}
	if err := sc.Err(); err != nil {
		return start, fmt.Errorf("reading stream: %w", err)
	}
	return start, nil
}

// TauTable renders τ for several TTFT ceilings.
func (m *Measurement) TauTable(tmaxes []time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %14s %10s\n", "T_max", "τ (tokens)", "chunks")
	for _, t := range tmaxes {
		tau := m.Tau(t)
		fmt.Fprintf(&b, "%-10s %14s %10.1f\n", t, strconv.FormatFloat(tau, 'f', 0, 64), tau/float64(m.ChunkSize))
	}
	return b.String()
}
