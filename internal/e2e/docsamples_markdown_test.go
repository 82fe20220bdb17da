package e2e

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// A doc sample is a request and its answer in README.md or docs/*.md,
// marked for TestDocSamples by an HTML comment readers do not see:
//
//	<!-- sample: NAME [mask=key,key] -->
//	```sh
//	curl -s ... (one command; `\` continues a line)
//	```
//	```json            (or ``` with the status line and headers of curl -i)
//	{...}
//	```
//
// A command with its output in one block (a line `$ command`, then the
// output) is a sample too. mask= names JSON keys whose values depend on
// the moment, beside those every sample masks (ids, times).
type docSample struct {
	page, name string
	line       int      // of the marker, 1-based
	command    string   // as written, continuation lines joined
	answer     string   // as written
	mask       []string // extra keys compared by kind only
}

var (
	sampleMarker = regexp.MustCompile(`^<!--\s*sample:\s*(\S+)((?:\s+\w+=\S+)*)\s*-->\s*$`)
	shellVar     = regexp.MustCompile(`^\$(\w+)|^\$\{(\w+)\}`)
	curlFlags    = regexp.MustCompile(`^-[siS]+$`)
)

// readSamples returns the samples of the Markdown page at root/rel, in page
// order; a marker not followed by its blocks is an error.
func readSamples(root, rel string) ([]docSample, error) {
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(src), "\n")
	var out []docSample
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(strings.TrimSpace(lines[i]), "<!-- sample") {
			continue
		}
		m := sampleMarker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			return nil, fmt.Errorf("%s:%d: a sample marker reads <!-- sample: NAME [mask=key,...] -->", rel, i+1)
		}
		s := docSample{page: rel, name: m[1], line: i + 1}
		for _, opt := range strings.Fields(m[2]) {
			k, v, _ := strings.Cut(opt, "=")
			if k != "mask" {
				return nil, fmt.Errorf("%s:%d: unknown sample option %q", rel, i+1, k)
			}
			s.mask = strings.Split(v, ",")
		}
		first, next, err := fencedBlock(lines, i+1)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: sample %s: %w", rel, i+1, s.name, err)
		}
		if cmd, rest, ok := strings.Cut(first, "\n"); ok && strings.HasPrefix(cmd, "$ ") {
			s.command, s.answer = strings.TrimPrefix(cmd, "$ "), rest
		} else {
			var answer string
			if answer, next, err = fencedBlock(lines, next); err != nil {
				return nil, fmt.Errorf("%s:%d: sample %s: its answer: %w", rel, i+1, s.name, err)
			}
			s.command, s.answer = first, answer
		}
		out = append(out, s)
		i = next - 1
	}
	return out, nil
}

// fencedBlock returns the content of the fenced block that starts at line
// from (blank lines before it skipped) and the line after it.
func fencedBlock(lines []string, from int) (string, int, error) {
	for from < len(lines) && strings.TrimSpace(lines[from]) == "" {
		from++
	}
	if from >= len(lines) || !strings.HasPrefix(lines[from], "```") {
		return "", 0, fmt.Errorf("want a fenced block at line %d", from+1)
	}
	for end := from + 1; end < len(lines); end++ {
		if strings.HasPrefix(lines[end], "```") {
			return strings.Join(lines[from+1:end], "\n"), end + 1, nil
		}
	}
	return "", 0, fmt.Errorf("the block at line %d is not closed", from+1)
}

// shellWords splits a command as sh would: quotes, backslash-newline, the
// variables the docs define ($API_TOKEN, $ADMIN_TOKEN, from vars) expanded
// outside single quotes, a # word starting a comment. Anything else a
// reader's shell would do differently (another variable, $(...), a pipe)
// is an error rather than a guess.
func shellWords(cmd string, vars map[string]string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, w.String())
		}
		w.Reset()
		inWord = false
	}
	expand := func(rest string) (int, error) {
		m := shellVar.FindStringSubmatch(rest)
		if m == nil {
			return 0, fmt.Errorf("unsupported shell expansion at %q", rest)
		}
		name := m[1] + m[2]
		v, ok := vars[name]
		if !ok {
			return 0, fmt.Errorf("$%s is not one of the variables the docs define", name)
		}
		w.WriteString(v)
		return len(m[0]), nil
	}
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch {
		case c == '\\' && i+1 < len(cmd) && cmd[i+1] == '\n':
			i++
		case c == ' ' || c == '\t' || c == '\n':
			flush()
		case c == '#' && !inWord:
			for i < len(cmd) && cmd[i] != '\n' {
				i++
			}
		case c == '\'':
			end := strings.IndexByte(cmd[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unclosed single quote")
			}
			w.WriteString(cmd[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			inWord = true
			for i++; ; i++ {
				if i >= len(cmd) {
					return nil, fmt.Errorf("unclosed double quote")
				}
				if cmd[i] == '"' {
					break
				}
				if cmd[i] == '\\' && i+1 < len(cmd) && strings.IndexByte("\"\\$`", cmd[i+1]) >= 0 {
					i++
					w.WriteByte(cmd[i])
					continue
				}
				if cmd[i] == '$' {
					n, err := expand(cmd[i:])
					if err != nil {
						return nil, err
					}
					i += n - 1
					continue
				}
				w.WriteByte(cmd[i])
			}
		case c == '$':
			n, err := expand(cmd[i:])
			if err != nil {
				return nil, err
			}
			i += n - 1
			inWord = true
		case strings.IndexByte("|;&<>`(){}", c) >= 0:
			return nil, fmt.Errorf("unsupported shell syntax %q", c)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words, nil
}

// curlRequest is what a sample's curl command asks.
type curlRequest struct {
	method, path string // path with its query
	header       [][2]string
	body         string
	include      bool // -i: the answer shows the status line and headers
}

// docHosts are the addresses the samples call: make run's limiter.
var docHosts = map[string]bool{"localhost:8080": true, "127.0.0.1:8080": true}

// parseCurl reads the curl options the samples use.
func parseCurl(words []string) (curlRequest, error) {
	var r curlRequest
	if len(words) == 0 || words[0] != "curl" {
		return r, fmt.Errorf("not a curl command: %q", words)
	}
	rawURL := ""
	for i := 1; i < len(words); i++ {
		a := words[i]
		arg := func() (string, error) {
			if i+1 >= len(words) {
				return "", fmt.Errorf("%s without its value", a)
			}
			i++
			return words[i], nil
		}
		var err error
		switch {
		case a == "-H" || a == "--header":
			var h string
			if h, err = arg(); err == nil {
				name, value, ok := strings.Cut(h, ":")
				if !ok {
					return r, fmt.Errorf("header %q has no colon", h)
				}
				r.header = append(r.header, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
			}
		case a == "-X" || a == "--request":
			r.method, err = arg()
		case a == "-d" || a == "--data" || a == "--data-raw":
			r.body, err = arg()
		case curlFlags.MatchString(a):
			r.include = r.include || strings.Contains(a, "i")
		case strings.HasPrefix(a, "-"):
			return r, fmt.Errorf("curl option %s is not read by the sample runner", a)
		default:
			if rawURL != "" {
				return r, fmt.Errorf("two URLs: %s and %s", rawURL, a)
			}
			rawURL = a
		}
		if err != nil {
			return r, err
		}
	}
	if !strings.Contains(rawURL, "://") {
		rawURL = "http://" + rawURL
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return r, err
	}
	if !docHosts[u.Host] {
		return r, fmt.Errorf("the sample calls %s, not make run's limiter (localhost:8080)", u.Host)
	}
	r.path = u.RequestURI()
	if r.method == "" {
		r.method = "GET"
		if r.body != "" {
			r.method = "POST"
		}
	}
	return r, nil
}
