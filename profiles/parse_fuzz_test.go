package profiles

import (
	"testing"
)

// FuzzParseRequest: any body either parses or is a 400, never a panic, and a
// parsed request's multimodal items all have a kind and a URL.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		``,
		`{}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":5}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}`,
		`{"model":"m","prompt":["a",[1,2,3],4]}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_image","image_url":"http://x/y.png"}]}],"instructions":"be brief","max_output_tokens":3}`,
		`{"messages":[{"content":[{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}}]}]}`,
		`[1,2]`,
		`{"max_tokens":-1}`,
		`{"messages":"nope"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseRequest("/v1/chat/completions", map[string]string{}, body)
		if err != nil {
			if HTTPStatus(err) != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		for i, it := range r.Multimodal {
			if it.Kind == "" || it.URL == "" {
				t.Fatalf("item %d: %+v", i, it)
			}
		}
		if r.MaxTokens < 0 {
			t.Fatalf("negative max tokens %d", r.MaxTokens)
		}
	})
}
