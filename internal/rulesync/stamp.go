package rulesync

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
)

// MaxRulesFileSize bounds the rules file: a larger file is refused (at the
// start, an error; on a reload, the running rules stay) before it is read.
// A rules file of thousands of rules is a few hundred KiB; the bound keeps
// a mistake (a log written to the wrong path, a generated file gone wrong)
// from costing the limiter memory and CPU on every poll.
const MaxRulesFileSize = 16 << 20 // bytes (16 MiB)

// Between two reads, a source on disk is only stat'ed: it is read again
// when what stat says of it changed, and in any case on SIGHUP and every
// readEvery polls. What stat says (size, modification time, inode: a file
// renamed over it is another inode) misses one change: a rewrite in place,
// of the same size, within the file system's timestamp granularity (1 s on
// some file systems, 2 s on FAT), which leaves the modification time as it
// was. A read made less than mtimeGranularity after the modification time
// it saw is therefore not trusted ("racy", as git calls its index entries):
// the source is read again at every poll until a read comes later than
// that, after which any write moves the modification time. readEvery
// covers the rest: file systems of coarser timestamps, a server's clock
// (NFS) behind this one, a modification time set back by hand.
const (
	mtimeGranularity = 2 * time.Second
	readEvery        = 60
)

// stamp is what stat says of a source on disk: of each of its files, the
// name, size, modification time and identity (device and inode); of a
// ConfigMap volume, where its "..data" link points.
type stamp struct {
	link  string
	files []fileStat
}

type fileStat struct {
	name string
	info os.FileInfo
}

// same reports whether a and b say the same of the same files.
func (a stamp) same(b stamp) bool {
	return a.link == b.link && slices.EqualFunc(a.files, b.files, func(x, y fileStat) bool {
		return x.name == y.name && x.info.Size() == y.info.Size() && x.info.ModTime().Equal(y.info.ModTime()) &&
			os.SameFile(x.info, y.info)
	})
}

// newest is the latest modification time of a's files.
func (a stamp) newest() time.Time {
	var t time.Time
	for _, f := range a.files {
		if m := f.info.ModTime(); m.After(t) {
			t = m
		}
	}
	return t
}

// statFile stats the rules file at path.
func statFile(path string) (stamp, error) {
	info, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{files: []fileStat{{name: path, info: info}}}, nil
}

// statDir stats the configuration files of the RLS directory dir, those
// rlsconfig.ReadDir reads (through the links of a ConfigMap volume).
func statDir(dir string) (stamp, error) {
	var s stamp
	if link, err := os.Readlink(filepath.Join(dir, "..data")); err == nil {
		s.link = link
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return stamp{}, err
	}
	for _, e := range entries {
		if !rlsconfig.IsConfigFile(e.Name()) {
			continue
		}
		info, err := os.Stat(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return stamp{}, err
		}
		s.files = append(s.files, fileStat{name: e.Name(), info: info})
	}
	return s, nil
}

// unchangedCheck tells a source whether it may skip reading: whether what
// stat says of it is what it said before the last read, that read was not
// racy, and fewer than readEvery polls were skipped since. Guarded by the
// source's lock.
type unchangedCheck struct {
	stat    func() (stamp, error)
	now     func() time.Time // the clock the file system's timestamps are on
	last    *stamp           // before the last read; nil: read next time
	readAt  time.Time
	skipped int
}

// unchanged reports whether the source may be left unread this poll.
func (c *unchangedCheck) unchanged() bool {
	if c.last == nil || c.skipped >= readEvery-1 || c.readAt.Sub(c.last.newest()) < mtimeGranularity {
		return false
	}
	s, err := c.stat()
	if err != nil || !s.same(*c.last) {
		return false
	}
	c.skipped++
	return true
}

// beforeRead stats the source before it is read, for read.
func (c *unchangedCheck) beforeRead() (*stamp, time.Time) {
	at := c.now()
	s, err := c.stat()
	if err != nil {
		return nil, at
	}
	return &s, at
}

// read records a read of the source (ok: it was read whole) and the stamp
// beforeRead took: until it changes, the next polls may skip reading.
func (c *unchangedCheck) read(s *stamp, at time.Time, ok bool) {
	c.last, c.readAt, c.skipped = nil, at, 0
	if ok {
		c.last = s
	}
}

// readRulesFile reads the rules file at path, refusing one larger than
// MaxRulesFileSize before reading it (and one that grows past it as it is
// read).
func readRulesFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooLarge := fmt.Errorf("%s: larger than %d bytes (16 MiB), the bound of a rules file", path, MaxRulesFileSize)
	if info, err := f.Stat(); err == nil && info.Size() > MaxRulesFileSize {
		return nil, tooLarge
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxRulesFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxRulesFileSize {
		return nil, tooLarge
	}
	return data, nil
}
