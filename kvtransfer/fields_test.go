package kvtransfer

import (
	"encoding/json"
	"testing"
)

func TestSplitObjectMatchesEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		`{}`, ` { "a" : 1 , "b":"x\"}y" ,"c":[1,{"d":"]"}],"e":null,"f":true,"g":-1.5e3,"h":{"i":"\\"}} `,
		`{"a":1,"a":2}`, `{"k\u00e9":"v"}`,
	} {
		f, err := splitObject([]byte(doc))
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		var got, want map[string]any
		if err := json.Unmarshal(f.marshal(), &got); err != nil {
			t.Errorf("%s: re-encoded %s is not JSON: %v", doc, f.marshal(), err)
			continue
		}
		_ = json.Unmarshal([]byte(doc), &want)
		jsonEq(t, doc, got, want)
	}
	for _, bad := range []string{``, `[]`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":"x}`, `{"a":[1,2}`, `{"a":1} x`, `{"a":tru}`, `{a:1}`, `{"a":1 "b":2}`} {
		if _, err := splitObject([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSidecarMalformedBody400(t *testing.T) {
	r := newRig(t, rigOpts{})
	for _, b := range []string{`{"model":`, `[1]`, `{"input":[{"content":[{"type":"input_image","image_url":5}]}]}`} {
		resp, body := r.send(t, t.Context(), PathResponses, b, map[string]string{HeaderPrefiller: r.prefill.addr(), HeaderEncoders: r.prefill.addr()})
		if resp.StatusCode != 400 {
			t.Errorf("%s: status %d, want 400: %s", b, resp.StatusCode, body)
		}
	}
	if len(r.prefill.got())+len(r.decoder.got()) != 0 {
		t.Error("a leg ran for a malformed body")
	}
}
