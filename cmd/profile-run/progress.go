package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"go.uber.org/zap"

	"github.com/trainscope/trainscope/pipeline"
)

// liveCounts are the profiler's and exporters' running totals the
// progress shows.
type liveCounts struct {
	ranges  uint64 // ranges collected so far
	drops   uint64 // ranges lost on the recording side
	backlog uint64 // spans queued for the OTLP endpoint, not yet delivered
}

// progress reports a run's advance while it trains: on a terminal one
// status line updated in place (an mpb bar: step, loss, step time,
// throughput, ranges/s, drops, exporter backlog, elapsed, ETA), with the
// per-step loss lines printed above it; elsewhere a log line every
// interval. Its methods are called from the training goroutine; the bar
// renders from its own.
type progress struct {
	mode      string // "bar", "log" or "off"
	out       io.Writer
	log       *zap.Logger
	steps     int
	rows      int // samples per step
	every     time.Duration
	live      func() liveCounts
	stepLines bool
	lr        float64 // the learning rate, for the divergence warning
	diverged  bool    // a loss was NaN or infinite: warned once
	dropping  bool    // ranges were dropped while recording: warned once

	container *mpb.Progress
	bar       *mpb.Bar

	mu        sync.Mutex
	start     time.Time
	done      int // steps finished
	last      int // the step finished last, numbered from 0 as the step lines
	loss      float64
	wall      time.Duration
	rate      float64 // ranges per second over the last interval
	counts    liveCounts
	lastAt    time.Time
	lastCount uint64
	lastLog   time.Time
}

// newProgress starts reporting. mode "auto" becomes "bar" when out is a
// terminal and "log" otherwise; so does "bar", saying so, since a status
// line drawn in place needs a terminal (off one it draws nothing, and the
// step lines held for drawing above it would be lost). live may be nil
// (profiling off).
func newProgress(mode string, out io.Writer, log *zap.Logger, cfg pipeline.Config, every time.Duration, stepLines bool, live func() liveCounts) *progress {
	switch {
	case mode == "auto":
		mode = "log"
		if isTerminal(out) {
			mode = "bar"
		}
	case mode == "bar" && !isTerminal(out):
		mode = "log"
		log.Info(fmt.Sprintf("-progress bar: stdout is not a terminal, so no status line; a log line every %v instead (-progress-every), as -progress auto does here", every))
	}
	if live == nil {
		live = func() liveCounts { return liveCounts{} }
	}
	now := time.Now()
	pr := &progress{
		mode: mode, out: out, log: log, steps: cfg.Steps, every: every, live: live, stepLines: stepLines,
		rows: cfg.Microbatches * cfg.MicrobatchSize * cfg.Replicas, lr: cfg.LearningRate,
		start: now, lastAt: now, lastLog: now,
	}
	if mode == "bar" {
		// The terminal itself: mpb sizes and redraws the line only on a
		// file it can ask (a terminal gives no EPIPE to watch for).
		var term io.Writer = out
		if f := fileOf(out); f != nil {
			term = f
		}
		pr.container = mpb.New(mpb.WithOutput(term), mpb.WithRefreshRate(200*time.Millisecond))
		pr.bar = pr.container.New(int64(cfg.Steps), mpb.BarStyle().Lbound("[").Rbound("]"),
			mpb.BarWidth(20),
			mpb.PrependDecorators(decor.Any(func(decor.Statistics) string { return pr.status() })),
		)
	}
	return pr
}

// lines is where per-step lines go: above the status line on a terminal.
func (pr *progress) lines() io.Writer {
	if pr.container != nil {
		return pr.container
	}
	return pr.out
}

// stepDone takes a finished step.
func (pr *progress) stepDone(sr pipeline.StepResult) {
	if pr.stepLines {
		fmt.Fprintf(pr.lines(), "step %d: loss %.6f, %v\n", sr.Step, sr.Loss, sr.Wall.Round(time.Microsecond))
	}
	if !pr.diverged && (math.IsNaN(sr.Loss) || math.IsInf(sr.Loss, 0)) {
		pr.diverged = true
		pr.log.Warn(fmt.Sprintf("step %d: the loss is %v: training diverged (-lr %g too high for this model?); it goes on, and the timings stay valid", sr.Step, sr.Loss, pr.lr))
	}
	now := time.Now()
	c := pr.live()
	pr.mu.Lock()
	pr.done, pr.last, pr.loss, pr.wall, pr.counts = sr.Step+1, sr.Step, sr.Loss, sr.Wall, c
	if dt := now.Sub(pr.lastAt); dt >= 500*time.Millisecond {
		pr.rate = float64(c.ranges-pr.lastCount) / dt.Seconds()
		pr.lastAt, pr.lastCount = now, c.ranges
	} else if pr.rate == 0 && dt > 0 {
		pr.rate = float64(c.ranges-pr.lastCount) / dt.Seconds()
	}
	logNow := pr.mode == "log" && (now.Sub(pr.lastLog) >= pr.every || pr.done == pr.steps)
	if logNow {
		pr.lastLog = now
	}
	pr.mu.Unlock()
	if !pr.dropping && c.drops > 0 {
		pr.dropping = true
		pr.log.Warn(fmt.Sprintf("ranges are being dropped while recording (%d by step %d): the recorders' buffers fill faster than the profiler's collector empties them; the steps that lose ranges are left out of the analysis, and every output lacks those ranges. Ranges of a few microseconds are finer than a profile needs: a larger -width or -microbatch-size makes fewer, longer ones", c.drops, sr.Step))
	}
	if pr.bar != nil {
		pr.bar.SetCurrent(int64(sr.Step + 1))
	}
	if logNow {
		pr.logLine()
	}
}

// eta is the time the remaining steps take at the mean pace so far.
func (pr *progress) eta(elapsed time.Duration) time.Duration {
	if pr.done == 0 {
		return 0
	}
	// float64(math.MaxInt64) is 2⁶³, one past the largest Duration:
	// converted back, it would wrap to the most negative one.
	left := float64(elapsed) / float64(pr.done) * float64(pr.steps-pr.done)
	if left >= float64(math.MaxInt64) {
		return math.MaxInt64
	}
	return time.Duration(left)
}

// status is the status line's text.
func (pr *progress) status() string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	elapsed := time.Since(pr.start)
	if pr.done == 0 {
		return fmt.Sprintf("step 0/%d  starting  elapsed %v", pr.steps, elapsed.Round(time.Second))
	}
	return fmt.Sprintf("step %d/%d  loss %.4f  %v/step  %.0f samples/s  %s ranges/s  drops %d  backlog %d  elapsed %v  ETA %v",
		pr.done, pr.steps, pr.loss, pr.wall.Round(10*time.Microsecond), float64(pr.rows)/pr.wall.Seconds(),
		si(pr.rate), pr.counts.drops, pr.counts.backlog, elapsed.Round(time.Second), pr.eta(elapsed).Round(time.Second))
}

// logLine logs the same as fields.
func (pr *progress) logLine() {
	pr.mu.Lock()
	elapsed := time.Since(pr.start)
	// The loss and step time are of the step finished last, named as
	// the step lines, the report and the trace name it; the steps done
	// count it.
	// Rounded as a reader wants them: the loss as the step lines print
	// it, rates to what their spread means, times to what they measure.
	fields := []zap.Field{
		zap.Int("step", pr.last), zap.Int("steps_done", pr.done), zap.Int("steps", pr.steps), zap.Float64("loss", roundTo(pr.loss, 6)),
		zap.Duration("step_time", pr.wall.Round(time.Microsecond)), zap.Float64("samples_per_s", roundTo(float64(pr.rows)/pr.wall.Seconds(), 1)),
		zap.Float64("ranges_per_s", math.Round(pr.rate)), zap.Uint64("drops", pr.counts.drops), zap.Uint64("backlog", pr.counts.backlog),
		zap.Duration("elapsed", elapsed.Round(time.Millisecond)), zap.Duration("eta", pr.eta(elapsed).Round(time.Second)),
	}
	pr.mu.Unlock()
	pr.log.Info("training", fields...)
}

// stop ends the status line (kept on screen, complete or not) before the
// summary prints.
func (pr *progress) stop() {
	if pr.bar == nil {
		return
	}
	if !pr.bar.Completed() {
		pr.bar.Abort(false)
	}
	pr.container.Wait()
	pr.bar, pr.container = nil, nil
}

// roundTo rounds v to decimals places as %.Nf prints it; NaN and the
// infinities stay.
func roundTo(v float64, decimals int) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'f', decimals, 64), 64)
	if err != nil {
		return v
	}
	return r
}

// si formats v with a k/M/G suffix.
func si(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.1fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
