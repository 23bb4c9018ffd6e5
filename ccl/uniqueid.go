package ccl

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultUniqueIDWait bounds ReadUniqueID when its context has no deadline.
const DefaultUniqueIDWait = 5 * time.Minute

// uniqueIDWait is DefaultUniqueIDWait; tests shorten it.
var uniqueIDWait = DefaultUniqueIDWait

// uniqueIDPath checks that name names a file directly inside dir.
func uniqueIDPath(op, dir, name string) (string, error) {
	if dir == "" {
		return "", Errorf(op, StatusInvalidArgument, "empty directory for unique id %q", name)
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`+"\x00") || filepath.Base(name) != name {
		return "", Errorf(op, StatusInvalidArgument, "unique id file name %q must name a file inside %s (no path separators, not \".\" or \"..\")", name, dir)
	}
	return filepath.Join(dir, name), nil
}

// WriteUniqueID writes id's bytes to dir/name. It writes a temporary file
// in dir and renames it into place, so a reader sees either no file or the
// whole id.
func WriteUniqueID(dir, name string, id UniqueID) error {
	const op = "WriteUniqueID"
	path, err := uniqueIDPath(op, dir, name)
	if err != nil {
		return err
	}
	if id == nil {
		return Errorf(op, StatusInvalidArgument, "nil unique id")
	}
	data := id.Data()
	if len(data) != id.Size() {
		return Errorf(op, StatusInvalidArgument, "unique id holds %d bytes, its Size is %d", len(data), id.Size())
	}
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return &Error{Op: op, Status: StatusError, Detail: "create temporary file for " + path, Err: err}
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		// Sync before the rename so that a reader on a shared file system
		// never sees the name before the bytes.
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return &Error{Op: op, Status: StatusError, Detail: "write " + path, Err: err}
	}
	return nil
}

// ReadUniqueID waits for dir/name to appear and loads its bytes into id.
// It polls until ctx ends; a context without a deadline is given
// DefaultUniqueIDWait, so the wait always ends. A file that never appears
// gives an error wrapping StatusTimeout naming the path and the time
// waited; a file of the wrong size, one wrapping StatusInvalidArgument.
func ReadUniqueID(ctx context.Context, dir, name string, id UniqueID) error {
	const op = "ReadUniqueID"
	path, err := uniqueIDPath(op, dir, name)
	if err != nil {
		return err
	}
	if id == nil {
		return Errorf(op, StatusInvalidArgument, "nil unique id")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, uniqueIDWait)
		defer cancel()
	}
	start := time.Now()
	wait := time.Millisecond
	var timer *time.Timer
	for {
		data, err := os.ReadFile(path)
		switch {
		case err == nil:
			if len(data) != id.Size() {
				return Errorf(op, StatusInvalidArgument, "unique id file %s has %d bytes, expected %d", path, len(data), id.Size())
			}
			if err := id.Load(data); err != nil {
				return &Error{Op: op, Status: StatusInvalidArgument, Detail: "load unique id from " + path, Err: err}
			}
			return nil
		case !errors.Is(err, fs.ErrNotExist):
			return &Error{Op: op, Status: StatusError, Detail: "read " + path, Err: err}
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return &Error{Op: op, Status: StatusTimeout,
				Detail: "unique id file " + path + " did not appear after waiting " + time.Since(start).Round(time.Millisecond).String(),
				Err:    ctx.Err()}
		case <-timer.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// CleanupUniqueID removes dir/name; a missing file is not an error.
func CleanupUniqueID(dir, name string) error {
	const op = "CleanupUniqueID"
	path, err := uniqueIDPath(op, dir, name)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &Error{Op: op, Status: StatusError, Detail: "remove " + path, Err: err}
	}
	return nil
}
