package rulesync

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeAt writes content to path in place (the same inode) and sets its
// modification time to at.
func writeAt(t *testing.T, path, content string, at time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

// A source is left unread while stat says what it said before its last
// read, and read again when stat changes, when the last read was racy
// (within the timestamp granularity of the modification time it saw), when
// that read failed, and every readEvery polls.
func TestUnchangedCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	mtime := time.Now().Add(-time.Hour).Truncate(time.Second)
	writeAt(t, path, "rules: []\n", mtime)
	clock := mtime.Add(time.Minute)
	c := unchangedCheck{stat: func() (stamp, error) { return statFile(path) }, now: func() time.Time { return clock }}
	readOK := func() { st, at := c.beforeRead(); c.read(st, at, true) }
	if c.unchanged() {
		t.Fatal("unchanged before any read")
	}
	readOK()
	for i := range readEvery - 1 {
		if !c.unchanged() {
			t.Fatalf("poll %d after a read: read again, want skipped", i+1)
		}
	}
	if c.unchanged() {
		t.Fatalf("poll %d after a read: skipped, want read", readEvery)
	}

	readOK()
	writeAt(t, path, "rules: [ ]\n", mtime.Add(time.Second)) // another size, another time
	if c.unchanged() {
		t.Error("skipped after the file changed")
	}
	// A same-size rewrite in place that keeps the modification time (as
	// one within the file system's granularity does) is the one change
	// stat misses: it is skipped, and seen on SIGHUP and within readEvery
	// polls. But not when the read came within the granularity of the
	// modification time it saw: that read is racy and not trusted.
	writeAt(t, path, "rules: []\n", mtime)
	readOK()
	writeAt(t, path, "rules: {}\n", mtime)
	if !c.unchanged() {
		t.Error("a same-size rewrite keeping the time, read an hour later: read, want skipped (stat sees nothing)")
	}
	clock = mtime.Add(mtimeGranularity - time.Millisecond)
	readOK()
	for range 3 {
		if c.unchanged() {
			t.Fatal("skipped after a racy read")
		}
	}

	clock = mtime.Add(time.Minute)
	st, at := c.beforeRead()
	c.read(st, at, false)
	if c.unchanged() {
		t.Error("skipped after a failed read")
	}
	// A file renamed over it is another file, whatever its size and time.
	readOK()
	other := path + ".new"
	writeAt(t, other, "rules: {}\n", mtime)
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if c.unchanged() {
		t.Error("skipped after a file of the same size and time was renamed over it")
	}
}

// A rules file over MaxRulesFileSize is refused before it is read, with an
// error naming the file and the bound.
func TestRulesFileOverTheBoundIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxRulesFileSize + 1); err != nil { // sparse: nothing written
		t.Fatal(err)
	}
	f.Close()
	_, err = readRulesFile(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "16 MiB") {
		t.Errorf("a file of %d bytes: %v; want an error naming it and the 16 MiB bound", MaxRulesFileSize+1, err)
	}
	if err := os.Truncate(path, MaxRulesFileSize); err != nil {
		t.Fatal(err)
	}
	if data, err := readRulesFile(path); err != nil || len(data) != MaxRulesFileSize {
		t.Errorf("a file of the bound exactly: %d bytes, %v", len(data), err)
	}
}
