// Package rlsconfig loads the YAML configuration files of
// envoyproxy/ratelimit (Envoy's rate limit service) as they are, and turns
// them into descriptor rules of package rules: one rules.Rule per
// descriptor with a rate_limit, with its path from the top of the tree in
// rules.DescriptorMatch. The rules of a directory of such files
// (RLS_CONFIG_DIR) join the rules file and the dynamic rules in one rule
// set.
//
// The format is envoyproxy/ratelimit's: a domain per file (unique across
// the files), a tree of descriptors (key, optional value, a value with '*'
// being a wildcard), each with an optional rate_limit (unit,
// requests_per_unit, unit_multiplier, name, replaces, unlimited) and the
// flags shadow_mode, detailed_metric, value_to_metric and share_threshold.
// As an extension a rate_limit may also choose the algorithm, a token
// bucket's burst, a penalty, the Redis failure policy, a schedule,
// escalations, several limits in the rules-file form, or the IPv6 grouping
// of the address levels (ipv6_prefix; see rateLimitYAML).
//
// The package is pure: it imports no driver and does no I/O beyond
// ReadDir and LoadDir.
package rlsconfig

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// Bounds of a configuration directory. A directory with more files, a
// file larger than MaxFileSize, or files larger than MaxTotalSize
// together, is refused whole: a limit never silently goes missing.
const (
	MaxFiles     = 1000
	MaxFileSize  = 4 << 20  // bytes
	MaxTotalSize = 16 << 20 // bytes, every file together
	// MaxDescriptors bounds the descriptors of a configuration, every file
	// (or document) together, at every level: what a limiter compiles and
	// holds stays within tens of megabytes.
	MaxDescriptors = 25_000
)

// Priority is the priority of every rule of a configuration directory (the
// rules file's default).
const Priority = 100

// File is one configuration file: its base name and content.
type File struct {
	Name string
	Data []byte
}

// Config is the configuration of a directory, converted.
type Config struct {
	// Files are the base names of the files loaded, sorted.
	Files []string
	// Domains are the domains the files define, in file order; a domain
	// without any rate_limit is listed too (it has no rules).
	Domains []Domain
	// Rules are the descriptor rules, by file, then in the order of the
	// tree (a descriptor before its nested ones). They pass
	// rules.Rule.Validate and compile together.
	Rules []rules.Rule
	// Hash is Hash of the files: it changes when any name or content does.
	Hash string
	// Warnings are the keys the files' meaning does not use, in file
	// order (see Warning).
	Warnings []Warning
}

// Domain is one domain of a Config.
type Domain struct {
	Name string
	File string // base name of the file defining it
	// Rules is how many of Config.Rules are of this domain.
	Rules int
}

// Domain returns the domain named name, or nil.
func (c *Config) Domain(name string) *Domain {
	for i := range c.Domains {
		if c.Domains[i].Name == name {
			return &c.Domains[i]
		}
	}
	return nil
}

// IsConfigFile reports whether a directory entry named name is read as a
// configuration file: *.yaml or *.yml, not a dotfile (editors' swap files,
// and the "..data" links of Kubernetes ConfigMap volumes, start with one).
func IsConfigFile(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}

// maxReads bounds the reads of a directory that changes while it is read.
const maxReads = 10

// ReadDir reads one consistent snapshot of the configuration files of dir,
// sorted by name: every regular file (or symbolic link to one) that
// IsConfigFile names. Other entries, subdirectories included, are ignored:
// the directory is not read recursively. More than MaxFiles files, one
// larger than MaxFileSize, or more than MaxTotalSize bytes in all, is an
// error.
//
// A directory whose "..data" is a symbolic link is a Kubernetes ConfigMap
// (or Secret, or projected) volume: its files are links through "..data"
// to the directory of the current generation, which the kubelet replaces
// by swapping the link. ReadDir reads the link once and that generation's
// directory alone, and reads again when "..data" has moved by the end of
// the read, so a snapshot never mixes two generations. Any
// other directory is read until two reads in a row give the same names and
// contents. When the directory changed during each of maxReads reads, it
// is an error ("changed while read"); the next call may succeed.
func ReadDir(dir string) ([]File, error) {
	if info, err := os.Lstat(filepath.Join(dir, "..data")); err == nil && info.Mode()&fs.ModeSymlink != 0 {
		return readGeneration(dir)
	}
	return readStable(dir)
}

// readGeneration reads the generation "..data" of dir links to, until
// "..data" links to the same directory after the read as before it.
func readGeneration(dir string) ([]File, error) {
	link := filepath.Join(dir, "..data")
	for range maxReads {
		// Readlink, not EvalSymlinks: one read of the link, where the
		// latter would fail on a generation removed as it resolves it.
		gen, err := os.Readlink(link)
		if err != nil {
			return nil, err
		}
		// A generation replaced meanwhile may be removed under the read:
		// whatever it gives (files missing, an error) is read again.
		path := gen
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		files, err := readFiles(path)
		after, aerr := os.Readlink(link)
		if aerr != nil {
			return nil, aerr
		}
		if after == gen {
			return files, err
		}
	}
	return nil, fmt.Errorf("%s: changed while read, %d times in a row (..data moved)", dir, maxReads)
}

// readStable reads dir until two reads in a row agree.
func readStable(dir string) ([]File, error) {
	files, err := readFiles(dir)
	if err != nil {
		return nil, err
	}
	hash := Hash(files)
	for range maxReads - 1 {
		again, err := readFiles(dir)
		if err != nil {
			return nil, err
		}
		if h := Hash(again); h != hash {
			files, hash = again, h
			continue
		}
		return again, nil
	}
	return nil, fmt.Errorf("%s: changed while read, %d times in a row", dir, maxReads)
}

// readFiles reads the configuration files of dir once, file by file: a
// file removed while dir is read is left out.
func readFiles(dir string) ([]File, error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, err
	}
	var files []File
	total := 0
	for _, e := range entries {
		if !IsConfigFile(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		info, err := os.Stat(path) // follows links, as ConfigMap volumes use them
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since listed, or a link left dangling by a swap
		}
		if err != nil {
			return nil, err
		}
		if !info.Mode().IsRegular() {
			continue
		}
		if len(files) == MaxFiles {
			return nil, fmt.Errorf("%s: more than %d configuration files", dir, MaxFiles)
		}
		data, err := readBounded(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if total += len(data); total > MaxTotalSize {
			return nil, fmt.Errorf("%s: configuration files larger than %d bytes (16 MiB) together", dir, MaxTotalSize)
		}
		files = append(files, File{Name: e.Name(), Data: data})
	}
	return files, nil
}

// readBounded reads the file at path, refusing one larger than MaxFileSize
// (also when it grows while being read).
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes (4 MiB)", path, MaxFileSize)
	}
	return data, nil
}

// Hash returns the hex SHA-256 of the files' names and contents (each
// length-prefixed, so that no two lists of files share one): a reload
// applies a directory only when its hash changed.
func Hash(files []File) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		for _, b := range [][]byte{[]byte(f.Name), f.Data} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// LoadDir reads and loads the configuration files of dir (ReadDir, then
// Load).
func LoadDir(dir string) (*Config, error) {
	files, err := ReadDir(dir)
	if err != nil {
		return nil, err
	}
	return Load(files)
}

// Load parses the files as envoyproxy/ratelimit does and converts them.
// Every problem of every file is reported (errors.Join), each naming the
// file, the domain and the descriptor path when it has them (see Error).
// The files' names must be distinct; their order is kept.
func Load(files []File) (*Config, error) {
	l := newLoader(Hash(files))
	for _, f := range files {
		l.add(f.Name, l.parseFile(f.Name, f.Data))
	}
	return l.finish()
}

// loader gathers the configurations of one Config (files or documents),
// their rules and their problems.
type loader struct {
	c        *Config
	problems problems
	nodes    []*node
	// budget is how many more descriptors the configurations may hold
	// (MaxDescriptors in all); negative once exceeded.
	budget int
}

func newLoader(hash string) *loader {
	return &loader{c: &Config{Hash: hash}, budget: MaxDescriptors}
}

// add takes the configuration named name, parsed into pf (nil when it has
// no valid domain).
func (l *loader) add(name string, pf *parsedFile) {
	l.c.Files = append(l.c.Files, name)
	if pf == nil {
		return
	}
	if prev := l.c.Domain(pf.name); prev != nil {
		l.problems.add(&Error{File: name, Domain: pf.name, Reason: fmt.Sprintf("duplicate domain (also in %s)", prev.File)})
		return
	}
	l.c.Domains = append(l.c.Domains, Domain{Name: pf.name, File: name})
	if !pf.faulty {
		l.nodes = append(l.nodes, pf.rules...)
		l.c.Warnings = append(l.c.Warnings, pf.warnings...)
	}
}

// finish names the rules and checks that they compile together.
func (l *loader) finish() (*Config, error) {
	if err := l.problems.err(); err != nil {
		return nil, err
	}
	c := l.c
	assignIDs(l.nodes)
	c.Rules = slices.Grow(c.Rules, len(l.nodes))
	for _, n := range l.nodes {
		c.Rules = append(c.Rules, n.rule)
		c.Domain(n.rule.Descriptor.Domain).Rules++
	}
	if err := check(c.Rules, l.nodes); err != nil {
		return nil, err
	}
	return c, nil
}

// maxProblems bounds the problems a load reports in full; past it they
// are counted. A configuration of many faults then costs no more to
// refuse than one that loads.
const maxProblems = 100

// problems are the problems of one load.
type problems struct {
	errs []error
	more int // past maxProblems
}

func (p *problems) full() bool { return len(p.errs) >= maxProblems }

func (p *problems) add(errs ...error) {
	for _, err := range errs {
		if p.full() {
			p.more++
		} else {
			p.errs = append(p.errs, err)
		}
	}
}

// err joins the problems, nil when there are none.
func (p *problems) err() error {
	if p.more > 0 {
		return errors.Join(append(p.errs, fmt.Errorf("and %d more problems", p.more))...)
	}
	return errors.Join(p.errs...)
}

// check validates and compiles the rules together, as the limiter will,
// and names the descriptor behind each problem.
func check(rs []rules.Rule, nodes []*node) error {
	_, err := rules.Compile(&rules.File{Rules: rs}, rules.Options{})
	if err == nil {
		return nil
	}
	byID := make(map[string]*node, len(nodes))
	for _, n := range nodes {
		byID[n.rule.ID] = n
	}
	fields := rules.FieldErrors(err)
	if len(fields) == 0 {
		return err
	}
	var p problems
	for _, fe := range fields {
		switch n := byID[fe.RuleID]; {
		case p.full():
			p.more++
		case n == nil:
			p.add(fe)
		default:
			p.add(n.errorf(ruleField(fe.Field, n.limitsForm), "%s", fe.Reason))
		}
	}
	return p.err()
}

// ruleField names a field of a converted rule as the configuration file
// writes it: the limit built from unit and requests_per_unit is named by
// them, the other rule fields sit in rate_limit.
func ruleField(field string, limitsForm bool) string {
	if !limitsForm {
		switch {
		case field == "limits" || field == "limits[0]" || field == "limits[0].requests" || field == "limits[0].rate":
			return "rate_limit.requests_per_unit"
		case field == "limits[0].burst":
			return "rate_limit.burst"
		case field == "limits[0].per":
			return "rate_limit.unit"
		}
	}
	if rest, ok := strings.CutPrefix(field, "descriptor."); ok {
		switch {
		case rest == "name" || rest == "unlimited" || rest == "release":
			return "rate_limit." + rest
		case strings.HasPrefix(rest, "replaces"):
			return "rate_limit." + rest
		}
		return rest
	}
	if field == "shadow" {
		return "shadow_mode"
	}
	return "rate_limit." + field
}
