package rlsconfig_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
)

// atomicWriter updates a directory as the kubelet's atomic writer updates a
// ConfigMap volume: each generation's files go into a new hidden directory,
// a link ..data_tmp to it is renamed over ..data (the one atomic step), then
// the top-level links (name -> ..data/name) of new names are created, those
// of names gone removed, and the previous generation's directory removed.
type atomicWriter struct {
	dir   string
	gen   int
	names []string // the top-level links
	prev  string   // the previous generation's directory
}

func (w *atomicWriter) write(files map[string]string) error {
	w.gen++
	genDir := fmt.Sprintf("..gen_%06d", w.gen)
	if err := os.Mkdir(filepath.Join(w.dir, genDir), 0o700); err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(w.dir, genDir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(w.dir, "..data_tmp")
	if err := os.Symlink(genDir, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(w.dir, "..data")); err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(files))
	for _, name := range names {
		if !slices.Contains(w.names, name) {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(w.dir, name)); err != nil {
				return err
			}
		}
	}
	for _, name := range w.names {
		if !slices.Contains(names, name) {
			if err := os.Remove(filepath.Join(w.dir, name)); err != nil {
				return err
			}
		}
	}
	w.names = names
	if w.prev != "" {
		if err := os.RemoveAll(filepath.Join(w.dir, w.prev)); err != nil {
			return err
		}
	}
	w.prev = genDir
	return nil
}

// asFiles is files as ReadDir returns them.
func asFiles(files map[string]string) []rlsconfig.File {
	var out []rlsconfig.File
	for _, name := range slices.Sorted(maps.Keys(files)) {
		out = append(out, rlsconfig.File{Name: name, Data: []byte(files[name])})
	}
	return out
}

// A ConfigMap volume updated over and over while it is read: every
// snapshot ReadDir returns is one generation whole, never old files beside
// new ones or a domain missing. The update swaps two generations that
// share a file name with different contents and each have a name of their
// own. Bounded by time (2s) and by reads; a reader that went file by file
// through the top-level links found a mix within the first 100 reads.
func TestReadDirConfigMapSwap(t *testing.T) {
	gens := []map[string]string{
		{"a.yaml": "domain: a\n", "b.yaml": "domain: b\n# generation 1\n"},
		{"b.yaml": "domain: b\n# generation 2\n", "c.yaml": "domain: c\n"},
	}
	want := map[string]int{rlsconfig.Hash(asFiles(gens[0])): 0, rlsconfig.Hash(asFiles(gens[1])): 1}
	w := &atomicWriter{dir: t.TempDir()}
	if err := w.write(gens[0]); err != nil {
		t.Fatal(err)
	}

	var stopped atomic.Bool
	var wg sync.WaitGroup
	var writeErr error
	wg.Go(func() {
		for i := 1; !stopped.Load() && writeErr == nil; i++ {
			writeErr = w.write(gens[i%2])
		}
	})
	stop := func() { stopped.Store(true); wg.Wait() }
	defer stop()

	var seen [2]int
	unstable := 0
	deadline := time.Now().Add(2 * time.Second)
	for reads := 0; reads < 20000 && time.Now().Before(deadline); reads++ {
		files, err := rlsconfig.ReadDir(w.dir)
		if err != nil {
			if !strings.Contains(err.Error(), "changed while read") {
				t.Fatalf("read %d: %v", reads, err)
			}
			unstable++ // no snapshot, which is no mix either
			continue
		}
		gen, ok := want[rlsconfig.Hash(files)]
		if !ok {
			var got []string
			for _, f := range files {
				got = append(got, f.Name+"="+strings.TrimSpace(string(f.Data)))
			}
			t.Fatalf("read %d is a mix of generations: %q", reads, got)
		}
		seen[gen]++
	}
	stop()
	if writeErr != nil {
		t.Fatal(writeErr)
	}
	t.Logf("%d generations written; snapshots of each: %v; %d reads found the directory changing every time", w.gen, seen, unstable)
	if seen[0]+seen[1] == 0 {
		t.Fatal("no read returned a snapshot")
	}
}
