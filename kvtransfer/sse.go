package kvtransfer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// maxSSELine bounds one SSE line (a data event) the relay will assemble.
const maxSSELine = 16 << 20

// relaySSE copies an event stream line by line, rewriting the usage of data
// events when cached is set, and flushes whenever the upstream has nothing
// more buffered, so that tokens reach the client as they are produced.
func relaySSE(w http.ResponseWriter, upstream io.Reader, cached *int) error {
	fl, _ := w.(http.Flusher)
	br := bufio.NewReaderSize(upstream, 32<<10)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				buf = append(buf, line...)
				if len(buf) > maxSSELine {
					return fmt.Errorf("SSE line over %d bytes", maxSSELine)
				}
			}
			line = buf
		}
		if len(line) > 0 {
			if cached != nil {
				line = rewriteSSELine(line, *cached)
			}
			if _, werr := w.Write(line); werr != nil {
				return nil // the client is gone; the request context ends the leg
			}
			if fl != nil && br.Buffered() == 0 {
				fl.Flush()
			}
		}
		if err == io.EOF {
			if fl != nil {
				fl.Flush()
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var (
	dataPrefix = []byte("data:")
	usageKey   = []byte(`"usage"`)
	usageNull  = []byte(`"usage":null`)
)

// rewriteSSELine rewrites cached_tokens in a `data: {...}` line that carries
// a usage object; every other line passes byte for byte.
func rewriteSSELine(line []byte, cached int) []byte {
	if !bytes.HasPrefix(line, dataPrefix) || !bytes.Contains(line, usageKey) || bytes.Contains(line, usageNull) {
		return line
	}
	payload := bytes.TrimPrefix(line, dataPrefix)
	lead := 0
	for lead < len(payload) && payload[lead] == ' ' {
		lead++
	}
	end := len(payload)
	for end > lead && (payload[end-1] == '\n' || payload[end-1] == '\r') {
		end--
	}
	obj := payload[lead:end]
	if len(obj) == 0 || obj[0] != '{' {
		return line
	}
	nobj := rewriteCached(obj, cached)
	out := make([]byte, 0, len(line)+16)
	out = append(out, dataPrefix...)
	out = append(out, payload[:lead]...)
	out = append(out, nobj...)
	out = append(out, payload[end:]...)
	return out
}
