package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress draws a one-line bar on a terminal: "[#####.....] 48% pack
// 256KiB rep 3/5  ETA 41s". It stays silent for the first delay, so short
// runs print nothing, and a nil *progress is a no-op. Not safe for
// concurrent use: the harness drives it from one goroutine.
type progress struct {
	w     io.Writer
	total int
	done  int
	start time.Time
	last  time.Time
	delay time.Duration
	drawn bool
}

const progressWidth = 30

func newProgress(w io.Writer, delay time.Duration) *progress {
	if w == nil {
		return nil
	}
	now := time.Now()
	return &progress{w: w, start: now, delay: delay}
}

// add plans n more steps.
func (p *progress) add(n int) {
	if p != nil {
		p.total += n
	}
}

// step records one finished step and redraws at most ten times a second.
func (p *progress) step(label string) {
	if p == nil {
		return
	}
	p.done++
	now := time.Now()
	if now.Sub(p.start) < p.delay || now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last = now
	p.drawn = true
	total := max(p.total, p.done)
	frac := float64(p.done) / float64(total)
	filled := int(frac * progressWidth)
	eta := "?"
	if p.done > 0 {
		el := now.Sub(p.start)
		eta = (time.Duration(float64(el)/frac) - el).Round(time.Second).String()
	}
	if len(label) > 40 {
		label = label[:40]
	}
	fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %-40s ETA %-6s", strings.Repeat("#", filled), strings.Repeat(".", progressWidth-filled), 100*frac, label, eta)
}

// finish erases the bar, leaving the terminal as it was.
func (p *progress) finish() {
	if p == nil || !p.drawn {
		return
	}
	fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", progressWidth+60))
	p.drawn = false
}

// isTerminal reports whether f is a character device (a terminal), so CI
// logs, which are files or pipes, get no bar.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
