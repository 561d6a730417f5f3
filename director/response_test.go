package director

import (
	"testing"

	"github.com/spillway-llm/spillway/profiles"
)

// feedAll splits data at every given offset and feeds the pieces.
func feedAll(p *responseParser, data string, cuts ...int) profiles.Usage {
	prev := 0
	for _, c := range cuts {
		p.feed([]byte(data[prev:c]))
		prev = c
	}
	p.feed([]byte(data[prev:]))
	return p.finish()
}

const sseStream = "data: {\"id\":\"1\",\"choices\":[{\"delta\":{\"role\":\"assistant\"}}],\"usage\":null}\n\n" +
	"data: {\"id\":\"1\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\r\n\r\n" +
	": keep-alive comment\n\n" +
	"data: {\"id\":\"1\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":3,\"total_tokens\":14,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n" +
	"data: [DONE]\n\n"

func TestSSEUsageAcrossEveryChunkBoundary(t *testing.T) {
	want := profiles.Usage{PromptTokens: 11, CompletionTokens: 3, CachedTokens: 8, Reported: true}
	for cut := 1; cut < len(sseStream); cut++ {
		p := responseParser{sse: true}
		if got := feedAll(&p, sseStream, cut); got != want {
			t.Fatalf("cut at %d (%q|%q): usage %+v, want %+v", cut, sseStream[:cut], sseStream[cut:], got, want)
		}
	}
	// Byte by byte.
	p := responseParser{sse: true}
	for i := range len(sseStream) {
		p.feed([]byte{sseStream[i]})
	}
	if got := p.finish(); got != want {
		t.Fatalf("byte by byte: %+v", got)
	}
}

func TestSSELastUsageWinsAndNoTrailingNewline(t *testing.T) {
	s := "data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: {\"usage\": {\"prompt_tokens\":5,\"completion_tokens\":7}}"
	p := responseParser{sse: true}
	got := feedAll(&p, s, 10, 40)
	if got.PromptTokens != 5 || got.CompletionTokens != 7 || !got.Reported {
		t.Fatalf("usage %+v, want the last event's 5/7", got)
	}
}

func TestSSEWithoutUsage(t *testing.T) {
	s := "data: {\"choices\":[{\"delta\":{\"content\":\"a \\\"usage\\\": b\"}}],\"usage\":null}\n\ndata: [DONE]\n\n"
	p := responseParser{sse: true}
	if got := feedAll(&p, s, 7); got.Reported {
		t.Fatalf("no usage was sent, got %+v", got)
	}
}

func TestNonStreamUsage(t *testing.T) {
	body := `{"id":"x","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"hello"}}],` +
		`"usage":{"prompt_tokens":100,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":64}}}`
	p := responseParser{}
	got := feedAll(&p, body, 3, 50, 120)
	want := profiles.Usage{PromptTokens: 100, CompletionTokens: 20, CachedTokens: 64, Reported: true}
	if got != want {
		t.Fatalf("usage %+v, want %+v", got, want)
	}
}

func TestResponsesAPIStreamUsage(t *testing.T) {
	s := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":4,\"input_tokens_details\":{\"cached_tokens\":2}}}}\n\n"
	p := responseParser{sse: true}
	got := feedAll(&p, s, 60)
	want := profiles.Usage{PromptTokens: 9, CompletionTokens: 4, CachedTokens: 2, Reported: true}
	if got != want {
		t.Fatalf("usage %+v, want %+v", got, want)
	}
}

func TestMalformedAndOversizedResponsesDoNotPanic(t *testing.T) {
	p := responseParser{sse: true}
	p.feed([]byte("data: {\"usage\":{\"prompt_tokens\":\"x\"}}\n"))
	long := make([]byte, maxSSELine+10)
	for i := range long {
		long[i] = 'a'
	}
	p.feed([]byte("data: "))
	p.feed(long)
	p.feed([]byte("\ndata: {\"usage\":{\"prompt_tokens\":3}}\n"))
	if got := p.finish(); got.PromptTokens != 3 {
		t.Fatalf("the line after an oversized one must still parse, got %+v", got)
	}
	q := responseParser{}
	q.feed(make([]byte, maxResponseBody+1))
	if got := q.finish(); got.Reported {
		t.Fatalf("oversized body: %+v", got)
	}
}

func TestHasUsageObject(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"usage":{}}`:              true,
		`{"usage" :  {"a":1}}`:      true,
		`{"usage":null}`:            false,
		`{"x":"usage"}`:             false,
		`{"usage":null,"usage":{}}`: true,
		`"usage"`:                   false,
	} {
		if got := hasUsageObject([]byte(doc)); got != want {
			t.Errorf("hasUsageObject(%s) = %v, want %v", doc, got, want)
		}
	}
}
