package imagesize

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func seedImages(t testing.TB) [][]byte {
	return [][]byte{
		encodePNG(t, 3, 2),
		encodeJPEG(t, 5, 7),
		progressiveJPEG(t, 9, 4),
		jpegWithAPP(t, 4, 4, 300),
		encodeGIF(t, 6, 3),
		webpVP8(1280, 720),
		webpVP8L(200, 300),
		webpVP8X(4000, 3000),
		[]byte{0xFF, 0xD8, 0xFF, 0xFF, 0xFF, 0xC0, 0x00, 0x08},
		[]byte("GIF89a"),
		[]byte("RIFF\x00\x00\x00\x00WEBPVP8X"),
	}
}

// FuzzDecode: any bytes give a size within the limits or an *Error, never a
// panic; the same bytes through a base64 data URL give the same answer.
func FuzzDecode(f *testing.F) {
	for _, b := range seedImages(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := Limits{MaxHeaderBytes: 4096}
		info, err := Decode(bytes.NewReader(data), lim)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T %v is not *Error", err, err)
			}
		} else if info.Width <= 0 || info.Height <= 0 || info.Width > DefaultLimits.MaxSide || info.Height > DefaultLimits.MaxSide {
			t.Fatalf("accepted size %+v", info)
		}
		info2, err2 := FromDataURL("data:image/x;base64,"+base64.StdEncoding.EncodeToString(data), lim)
		if (err == nil) != (err2 == nil) || info != info2 {
			t.Fatalf("raw %+v %v, data URL %+v %v", info, err, info2, err2)
		}
	})
}

// FuzzDataURL: arbitrary URL strings never panic or hang.
func FuzzDataURL(f *testing.F) {
	f.Add("data:image/png;base64,iVBORw0KGgo=")
	f.Add("data:,%89PNG")
	f.Add("data:image/gif;base64,R0lGODlhAQABAAAAACw=")
	f.Add("data:image/png;base64,iV==")
	for _, b := range seedImages(f)[:3] {
		f.Add("data:image/x;base64," + base64.URLEncoding.EncodeToString(b))
	}
	f.Fuzz(func(t *testing.T, u string) {
		info, err := FromDataURL(u, Limits{MaxHeaderBytes: 4096})
		if err == nil && (info.Width <= 0 || info.Height <= 0) {
			t.Fatalf("accepted size %+v", info)
		}
	})
}

// TestWriteFuzzCorpus regenerates testdata/fuzz when SPILLWAY_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("SPILLWAY_WRITE_CORPUS") != "1" {
		t.Skip("set SPILLWAY_WRITE_CORPUS=1 to regenerate testdata/fuzz")
	}
	write := func(target string, i int, v string) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%02d", i)), []byte("go test fuzz v1\n"+v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range seedImages(t) {
		write("FuzzDecode", i, "[]byte("+strconv.Quote(string(b))+")")
		write("FuzzDataURL", i, "string("+strconv.Quote("data:image/x;base64,"+base64.StdEncoding.EncodeToString(b))+")")
	}
}
