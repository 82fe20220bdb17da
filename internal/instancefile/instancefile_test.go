package instancefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		data string
		want int64 // 0: refused
	}{
		{"count", "3\n", 3},
		{"no newline", "12", 12},
		{"largest", "10000\n", 10_000},
		{"empty", "", 0},
		{"newline only", "\n", 0},
		{"zero", "0\n", 0},
		{"negative", "-3\n", 0},
		{"plus sign", "+3\n", 0},
		{"too large", "10001\n", 0},
		{"overflow", "99999999999999999999999\n", 0},
		{"two lines", "3\n4\n", 0},
		{"spaces", " 3 \n", 0},
		{"hex", "0x10\n", 0},
		{"nul", "3\x00\n", 0},
		{"json", `{"live":3}`, 0},
		{"crlf", "3\r\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := Parse([]byte(tt.data))
			if tt.want == 0 {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Parse(%q) = %d, %v; want ErrInvalid", tt.data, n, err)
				}
				return
			}
			if err != nil || n != tt.want {
				t.Fatalf("Parse(%q) = %d, %v; want %d", tt.data, n, err, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"3\n", "0", "10000\n", "-1", "", "\n\n", "1e3"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := Parse(data)
		if err != nil {
			return
		}
		if n < 1 || n > MaxCount {
			t.Fatalf("Parse(%q) = %d, outside 1..%d", data, n, MaxCount)
		}
		if back, err := Parse(Format(n)); err != nil || back != n {
			t.Fatalf("Format(%d) does not parse back: %d, %v", n, back, err)
		}
	})
}

func TestWriteThenRead(t *testing.T) {
	dir := t.TempDir()
	if n, err := Read(dir); n != 0 || err != nil {
		t.Fatalf("no file: Read = %d, %v; want 0, nil", n, err)
	}
	for _, n := range []int64{3, 1, 250} {
		if err := Write(dir, n); err != nil {
			t.Fatal(err)
		}
		if got, err := Read(dir); got != n || err != nil {
			t.Fatalf("after Write(%d): Read = %d, %v", n, got, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("%d files in the directory, want only %s", len(entries), Name)
	}
	if err := Write(dir, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Write(0) = %v, want ErrInvalid", err)
	}
}

// What someone else put in the file's place is read as no count, and
// never blocks or reads without bound.
func TestReadHostileFiles(t *testing.T) {
	tests := []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"garbage", func(t *testing.T, path string) { write(t, path, "lots\n") }},
		{"huge", func(t *testing.T, path string) { write(t, path, "3\n"+strings.Repeat(" ", 1<<20)) }},
		{"count past the size bound", func(t *testing.T, path string) { write(t, path, strings.Repeat("0", 100)+"3\n") }},
		{"symbolic link to a count", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			write(t, target, "3\n")
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"symbolic link to an endless device", func(t *testing.T, path string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Skip(err)
			}
		}},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.plant(t, filepath.Join(dir, Name))
			if n, err := Read(dir); n != 0 || err == nil {
				t.Fatalf("Read = %d, %v; want 0 and an error", n, err)
			}
		})
	}
}

// Write replaces a symbolic link in the file's place; it never writes
// through it.
func TestWriteReplacesALink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "victim")
	write(t, target, "keep\n")
	if err := os.Symlink(target, filepath.Join(dir, Name)); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, 4); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); string(got) != "keep\n" {
		t.Fatalf("the link's target became %q", got)
	}
	if n, err := Read(dir); n != 4 || err != nil {
		t.Fatalf("Read = %d, %v; want 4", n, err)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
