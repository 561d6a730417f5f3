package kvtransfer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// fields is a request body's top-level members in their original order,
// values kept verbatim. The sidecar only edits top-level members, so it
// splits the object once with a structural scan (strings, escapes, nesting)
// instead of decoding and re-encoding the whole prompt: the engine validates
// the values it reads.
type fields []member

type member struct {
	key string
	raw json.RawMessage
}

func (f fields) get(k string) (json.RawMessage, bool) {
	for _, m := range f {
		if m.key == k {
			return m.raw, true
		}
	}
	return nil, false
}

func (f fields) has(k string) bool { _, ok := f.get(k); return ok }

// set replaces k's value, or appends k.
func (f *fields) set(k string, v json.RawMessage) {
	for i := range *f {
		if (*f)[i].key == k {
			(*f)[i].raw = v
			return
		}
	}
	*f = append(*f, member{key: k, raw: v})
}

func (f *fields) del(k string) {
	out := (*f)[:0]
	for _, m := range *f {
		if m.key != k {
			out = append(out, m)
		}
	}
	*f = out
}

func (f fields) clone() fields { return append(fields(nil), f...) }

func (f fields) marshal() []byte {
	n := 2
	for _, m := range f {
		n += len(m.key) + len(m.raw) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, m := range f {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, m.key)
		b = append(b, ':')
		b = append(b, m.raw...)
	}
	return append(b, '}')
}

// splitObject splits a JSON object into its top-level members. Duplicate
// keys keep the last value, as encoding/json does.
func splitObject(b []byte) (fields, error) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, fmt.Errorf("request body must be a JSON object")
	}
	i = skipWS(b, i+1)
	var f fields
	if i < len(b) && b[i] == '}' {
		if skipWS(b, i+1) != len(b) {
			return nil, fmt.Errorf("malformed JSON body: data after the object")
		}
		return fields{}, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, fmt.Errorf("malformed JSON body: want a member name at offset %d", i)
		}
		end, err := skipString(b, i)
		if err != nil {
			return nil, err
		}
		var key string
		if err := json.Unmarshal(b[i:end], &key); err != nil {
			return nil, fmt.Errorf("malformed JSON body: member name at offset %d: %v", i, err)
		}
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, fmt.Errorf("malformed JSON body: want ':' at offset %d", i)
		}
		i = skipWS(b, i+1)
		vend, err := skipValue(b, i)
		if err != nil {
			return nil, err
		}
		f.set(key, json.RawMessage(b[i:vend]))
		i = skipWS(b, vend)
		if i >= len(b) {
			return nil, fmt.Errorf("malformed JSON body: unterminated object")
		}
		if b[i] == '}' {
			if skipWS(b, i+1) != len(b) {
				return nil, fmt.Errorf("malformed JSON body: data after the object")
			}
			return f, nil
		}
		if b[i] != ',' {
			return nil, fmt.Errorf("malformed JSON body: want ',' or '}' at offset %d", i)
		}
		i = skipWS(b, i+1)
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		k := bytes.IndexAny(b[j:], "\"\\")
		if k < 0 {
			return 0, fmt.Errorf("malformed JSON body: unterminated string at offset %d", i)
		}
		j += k
		if b[j] == '"' {
			return j + 1, nil
		}
		j += 2 // skip the escaped character
		if j > len(b) {
			return 0, fmt.Errorf("malformed JSON body: unterminated string at offset %d", i)
		}
	}
}

// skipValue returns the offset after the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, fmt.Errorf("malformed JSON body: missing value")
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{' || c == '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("malformed JSON body: unterminated value at offset %d", i)
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\r' && b[j] != '\t' {
			j++
		}
		if j == i {
			return 0, fmt.Errorf("malformed JSON body: missing value at offset %d", i)
		}
		if !json.Valid(b[i:j]) {
			return 0, fmt.Errorf("malformed JSON body: bad literal %q at offset %d", b[i:j], i)
		}
		return j, nil
	}
}

// splitArray splits a JSON array into its elements, verbatim.
func splitArray(b []byte) ([]json.RawMessage, error) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, fmt.Errorf("want a JSON array")
	}
	i = skipWS(b, i+1)
	var out []json.RawMessage
	if i < len(b) && b[i] == ']' {
		return out, nil
	}
	for {
		end, err := skipValue(b, i)
		if err != nil {
			return nil, err
		}
		out = append(out, json.RawMessage(b[i:end]))
		i = skipWS(b, end)
		if i >= len(b) {
			return nil, fmt.Errorf("unterminated array")
		}
		if b[i] == ']' {
			return out, nil
		}
		if b[i] != ',' {
			return nil, fmt.Errorf("want ',' or ']' at offset %d", i)
		}
		i = skipWS(b, i+1)
	}
}
