//go:build !amd64 && !arm64

package goid

import (
	"bytes"
	"runtime"
	"strconv"
)

// get reads the goroutine's number from the header of its stack trace
// ("goroutine 18 [running]:").
func get() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}
