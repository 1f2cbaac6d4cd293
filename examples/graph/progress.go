package main

import (
	"os"
	"sync"
	"time"

	"github.com/bam-go/bam/examples/graph/graph"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// newProgress returns progress bars on stderr when it is a terminal, and
// nil (quiet) otherwise.
func newProgress() graph.Progress {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	return barProgress{}
}

type barProgress struct{}

func (barProgress) Start(phase string, total int64) graph.Bar {
	return &bar{p: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(phase),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish())}
}

type bar struct {
	mu sync.Mutex
	p  *progressbar.ProgressBar
}

func (b *bar) Add(n int64) {
	b.mu.Lock()
	_ = b.p.Add64(n)
	b.mu.Unlock()
}

func (b *bar) Done() {
	b.mu.Lock()
	_ = b.p.Finish()
	b.mu.Unlock()
}
