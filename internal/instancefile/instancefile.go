// Package instancefile keeps a limiter's last count of live limiter
// instances in a small file of a directory of its own, so that a limiter
// that restarts while Redis is unreachable, and so cannot read the
// heartbeats, does not take itself for the only one. The file is one line,
// the count in decimal; anything else, or a file that is not a regular
// file of at most MaxSize bytes, is refused and read as no count.
package instancefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Name is the file's name in its directory.
const Name = "live-instances"

// MaxSize bounds what Read reads: a count and a newline need far less.
const MaxSize = 64

// MaxCount is the largest count accepted: a fleet larger than this is not
// one this file describes (config.LOCAL_EXPECTED_INSTANCES has the same
// bound).
const MaxCount = 10_000

// ErrInvalid means the file holds something other than a count.
var ErrInvalid = errors.New("not a count of live instances")

// Parse returns the count data holds: a decimal integer from 1 to
// MaxCount, optionally followed by one newline.
func Parse(data []byte) (int64, error) {
	s := strings.TrimSuffix(string(data), "\n")
	if s == "" || len(s) > 5 {
		return 0, ErrInvalid
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, ErrInvalid
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > MaxCount {
		return 0, ErrInvalid
	}
	return n, nil
}

// Format is what Write writes for n.
func Format(n int64) []byte { return []byte(strconv.FormatInt(n, 10) + "\n") }

// Read returns the count kept in dir. A missing file is (0, nil): no count
// yet. The file is opened without following a symbolic link and without
// blocking (a FIFO put in its place), and must be a regular file.
func Read(dir string) (int64, error) {
	f, err := os.OpenFile(filepath.Join(dir, Name), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", Name, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", Name, err)
	}
	if !info.Mode().IsRegular() {
		return 0, fmt.Errorf("read %s: %w: not a regular file", Name, ErrInvalid)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", Name, err)
	}
	if len(data) > MaxSize {
		return 0, fmt.Errorf("read %s: %w: over %d bytes", Name, ErrInvalid, MaxSize)
	}
	n, err := Parse(data)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", Name, err)
	}
	return n, nil
}

// Write keeps n in dir: written to a new file beside it, then renamed over
// it, so a reader never sees half a count and a link in its place is
// replaced, not followed.
func Write(dir string, n int64) error {
	if n < 1 || n > MaxCount {
		return fmt.Errorf("write %s: %w: %d", Name, ErrInvalid, n)
	}
	tmp, err := os.CreateTemp(dir, "."+Name+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", Name, err)
	}
	_, werr := tmp.Write(Format(n))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", Name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, Name)); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", Name, err)
	}
	return nil
}
