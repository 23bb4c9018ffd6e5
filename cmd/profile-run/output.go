package main

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// outputFile is profile-run's stdout or stderr. Once the reader at the
// other end has gone (`profile-run | head`, head done: the write fails
// with EPIPE), what is written after is dropped and gone is called, once:
// profile-run goes on to write its files instead of dying of SIGPIPE with
// them half made.
type outputFile struct {
	f      *os.File
	gone   func()
	once   sync.Once
	broken atomic.Bool
}

func (o *outputFile) Write(b []byte) (int, error) {
	if o.broken.Load() {
		return len(b), nil
	}
	n, err := o.f.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		o.broken.Store(true)
		if o.gone != nil {
			o.once.Do(o.gone)
		}
		return len(b), nil
	}
	return n, err
}

// File is the file written to.
func (o *outputFile) File() *os.File { return o.f }

// fileOf returns the file behind w: w itself or the file of an
// outputFile; nil for any other writer.
func fileOf(w io.Writer) *os.File {
	switch v := w.(type) {
	case *os.File:
		return v
	case *outputFile:
		return v.f
	}
	return nil
}

// childOutput is what a wrapped command gets for w: the file itself where
// there is one, so that the command writes straight to it (a terminal
// stays a terminal, its buffering and colours unchanged, and a closed pipe
// is its to meet), else w through a pipe.
func childOutput(w io.Writer) io.Writer {
	if f := fileOf(w); f != nil {
		return f
	}
	return w
}
