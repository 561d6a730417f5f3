package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// progressBar draws one line per run on a terminal-ish writer.
type progressBar struct {
	w     io.Writer
	tty   bool // redraw in place; otherwise print the finished bar only
	mu    *sync.Mutex
	name  string
	label string
	last  int
}

const barWidth = 30

func (p *progressBar) start(label string, total int) {
	p.mu.Lock()
	p.label, p.last = label, -1
	p.mu.Unlock()
	p.update(0, total)
}

func (p *progressBar) update(done, total int) {
	if p.w == nil || total == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// redraw only when the bar moves a notch
	notch := done * barWidth / total
	if notch == p.last {
		return
	}
	p.last = notch
	if p.tty || done == total {
		p.drawLocked(done, total)
	}
}

func (p *progressBar) drawLocked(done, total int) {
	fill := barWidth * done / max(total, 1)
	cr := ""
	if p.tty {
		cr = "\r"
	}
	fmt.Fprintf(p.w, cr+"%-26s %-20s [%s%s] %d/%d", p.name, p.label, strings.Repeat("#", fill), strings.Repeat(".", barWidth-fill), done, total)
}

func (p *progressBar) end() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	fmt.Fprintln(p.w)
	p.mu.Unlock()
}

func (p *progressBar) fail(err error) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	fmt.Fprintf(p.w, "%-26s skipped: %v\n", p.name, err)
	p.mu.Unlock()
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
