package tokenproducer

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spillway-llm/spillway/profiles"
	"github.com/spillway-llm/spillway/tokenproducer/imagesize"
)

// RemoteFetchParams enable reading remote image headers. Off by default:
// fetching client-supplied URLs from the picker is a server-side request the
// operator must choose to allow.
type RemoteFetchParams struct {
	Enabled bool `json:"enabled"`
	// MaxBytes is the Range requested and the most read.
	MaxBytes int `json:"maxBytes,omitempty"`
	// Timeout bounds one fetch.
	Timeout profiles.Duration `json:"timeout,omitempty"`
	// CacheSize is how many URL → size answers are remembered.
	CacheSize int `json:"cacheSize,omitempty"`
}

func (p *RemoteFetchParams) defaults() {
	if p.MaxBytes <= 0 {
		p.MaxBytes = 64 << 10
	}
	if p.Timeout <= 0 {
		p.Timeout = profiles.Duration(300 * time.Millisecond)
	}
	if p.CacheSize <= 0 {
		p.CacheSize = 4096
	}
}

type fetcher struct {
	p      RemoteFetchParams
	client *http.Client
	lim    imagesize.Limits

	mu    sync.Mutex
	order *list.List // of *cacheEntry, front = most recent
	cache map[string]*list.Element
}

type cacheEntry struct {
	url  string
	info imagesize.Info
}

func newFetcher(p RemoteFetchParams, lim imagesize.Limits) *fetcher {
	p.defaults()
	lim.MaxHeaderBytes = p.MaxBytes
	return &fetcher{p: p, client: &http.Client{}, lim: lim, order: list.New(), cache: map[string]*list.Element{}}
}

func (f *fetcher) cached(u string) (imagesize.Info, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.cache[u]; ok {
		f.order.MoveToFront(e)
		return e.Value.(*cacheEntry).info, true
	}
	return imagesize.Info{}, false
}

func (f *fetcher) remember(u string, info imagesize.Info) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.cache[u]; ok {
		return
	}
	f.cache[u] = f.order.PushFront(&cacheEntry{url: u, info: info})
	for f.order.Len() > f.p.CacheSize {
		old := f.order.Back()
		f.order.Remove(old)
		delete(f.cache, old.Value.(*cacheEntry).url)
	}
}

// size fetches the first MaxBytes of an http(s) URL with a Range request
// and reads the header from them. Servers that ignore Range are read only
// up to MaxBytes as well.
func (f *fetcher) size(ctx context.Context, u string) (imagesize.Info, bool, error) {
	if info, ok := f.cached(u); ok {
		return info, true, nil
	}
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return imagesize.Info{}, false, fmt.Errorf("only http and https URLs are fetched")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(f.p.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return imagesize.Info{}, false, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=0-%d", f.p.MaxBytes-1))
	resp, err := f.client.Do(req)
	if err != nil {
		return imagesize.Info{}, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		return imagesize.Info{}, false, fmt.Errorf("GET answered %s", resp.Status)
	}
	info, err := imagesize.Decode(io.LimitReader(resp.Body, int64(f.p.MaxBytes)), f.lim)
	if err != nil {
		return imagesize.Info{}, false, err
	}
	f.remember(u, info)
	return info, false, nil
}
