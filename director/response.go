package director

import (
	"bytes"
	"encoding/json"

	"github.com/spillway-llm/spillway/profiles"
)

// Bounds on what the response observer buffers: a line or body beyond them
// is passed through untouched but not inspected for usage.
const (
	maxSSELine      = 1 << 20
	maxResponseBody = 8 << 20
)

// responseParser extracts usage from a response as its chunks stream by:
// from the last SSE data event that carries a usage object, or from the
// whole JSON body of a non-stream response. It never modifies chunks.
type responseParser struct {
	sse      bool
	line     []byte // partial SSE line carried across chunks
	skipLine bool   // the current line outgrew maxSSELine
	body     []byte // non-stream body
	overflow bool
	usage    profiles.Usage
}

func (p *responseParser) feed(chunk []byte) {
	if !p.sse {
		if p.overflow {
			return
		}
		if len(p.body)+len(chunk) > maxResponseBody {
			p.overflow, p.body = true, nil
			return
		}
		p.body = append(p.body, chunk...)
		return
	}
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			if !p.skipLine {
				if len(p.line)+len(chunk) > maxSSELine {
					p.skipLine, p.line = true, p.line[:0]
				} else {
					p.line = append(p.line, chunk...)
				}
			}
			return
		}
		seg := chunk[:i]
		chunk = chunk[i+1:]
		switch {
		case p.skipLine:
			p.skipLine = false
		case len(p.line) > 0:
			p.line = append(p.line, seg...)
			p.onLine(p.line)
			p.line = p.line[:0]
		default:
			p.onLine(seg)
		}
	}
}

// finish handles what is left at the end of the stream and returns the usage.
func (p *responseParser) finish() profiles.Usage {
	if p.sse {
		if len(p.line) > 0 && !p.skipLine {
			p.onLine(p.line)
		}
		p.line = nil
	} else if len(p.body) > 0 {
		if hasUsageObject(p.body) {
			p.parse(p.body)
		}
		p.body = nil
	}
	return p.usage
}

var dataPrefix = []byte("data:")

func (p *responseParser) onLine(l []byte) {
	l = bytes.TrimSuffix(l, []byte{'\r'})
	if !bytes.HasPrefix(l, dataPrefix) {
		return
	}
	payload := bytes.TrimSpace(l[len(dataPrefix):])
	if len(payload) == 0 || payload[0] != '{' || !hasUsageObject(payload) {
		return // [DONE], keep-alives, chunks with "usage": null
	}
	p.parse(payload)
}

type wireUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	InputTokens         int `json:"input_tokens"`  // /v1/responses
	OutputTokens        int `json:"output_tokens"` // /v1/responses
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

func (p *responseParser) parse(doc []byte) {
	var w struct {
		Usage    *wireUsage `json:"usage"`
		Response *struct {
			Usage *wireUsage `json:"usage"`
		} `json:"response"` // /v1/responses stream: response.completed event
	}
	if json.Unmarshal(doc, &w) != nil {
		return // not our business to police the engine's JSON
	}
	u := w.Usage
	if u == nil && w.Response != nil {
		u = w.Response.Usage
	}
	if u == nil {
		return
	}
	out := profiles.Usage{Reported: true, PromptTokens: u.PromptTokens + u.InputTokens, CompletionTokens: u.CompletionTokens + u.OutputTokens}
	if u.PromptTokensDetails != nil {
		out.CachedTokens = u.PromptTokensDetails.CachedTokens
	} else if u.InputTokensDetails != nil {
		out.CachedTokens = u.InputTokensDetails.CachedTokens
	}
	p.usage = out
}

var usageKey = []byte(`"usage"`)

// hasUsageObject reports whether doc has a "usage" key whose value is an
// object, so that the many stream chunks with "usage": null are not decoded.
func hasUsageObject(doc []byte) bool {
	for {
		i := bytes.Index(doc, usageKey)
		if i < 0 {
			return false
		}
		doc = doc[i+len(usageKey):]
		j := 0
		for j < len(doc) && isSpace(doc[j]) {
			j++
		}
		if j < len(doc) && doc[j] == ':' {
			j++
			for j < len(doc) && isSpace(doc[j]) {
				j++
			}
			if j < len(doc) && doc[j] == '{' {
				return true
			}
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
