package kvtransfer

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Run with an --allow-file: addresses in the picker's endpoints file are
// dialed, an edit that drops one makes it refused.
func TestRunAllowFile(t *testing.T) {
	checkGoroutines(t)
	dec := newFake(t, okDecode)
	pre := newFake(t, okPrefill)
	dir := t.TempDir()
	file := filepath.Join(dir, "endpoints.yaml")
	write := func(addrs ...string) {
		var b strings.Builder
		b.WriteString("endpoints:\n")
		for i, a := range addrs {
			b.WriteString("- name: p" + string(rune('0'+i)) + "\n  address: " + a + "\n")
		}
		if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(pre.addr())
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{Listen: "127.0.0.1:0", AllowFile: file, Sidecar: Options{Decoder: dec.srv.URL},
			OnListen: func(a net.Addr) { addrc <- a }})
	}()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	post := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr.String()+PathCompletions, strings.NewReader(`{"prompt":"x"}`))
		req.Header.Set(HeaderPrefiller, pre.addr())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post(); resp.StatusCode != 200 || resp.Header.Get(HeaderPrefill) != PrefillRemote {
		t.Fatalf("allowed prefiller: status %d %s", resp.StatusCode, resp.Header.Get(HeaderPrefill))
	}
	write("10.9.9.9:8000")
	deadline := time.Now().Add(10 * time.Second)
	for post().StatusCode != http.StatusForbidden {
		if time.Now().After(deadline) {
			t.Fatal("prefiller removed from the endpoints file is still allowed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// A bad decoder URL is an error, not a hang.
	if err := Run(context.Background(), RunOptions{Listen: "127.0.0.1:0", Sidecar: Options{Decoder: "ftp://x"}}); err == nil {
		t.Error("bad decoder accepted")
	}
}
