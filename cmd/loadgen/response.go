package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// response is what the load generator needs of an HTTP/1.x response.
type response struct {
	status int
	// body is at most maxKeptBody bytes of the body, in the caller's buffer:
	// valid until the next read.
	body []byte
	// close says the server ends the connection after this response.
	close bool
}

// maxKeptBody bounds the part of a body kept for classification; the rest
// is read and dropped. A decision is about 300 bytes.
const maxKeptBody = 64 << 10

// protocolError is a response that is not valid HTTP/1.x.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return "malformed response: " + e.msg }

func malformed(format string, args ...any) error {
	return &protocolError{msg: fmt.Sprintf(format, args...)}
}

// readResponse reads one response from r, keeping its body in buf (grown if
// need be and returned for reuse). It reads bodies framed by Content-Length,
// chunked encoding or the end of the connection, and skips interim 1xx
// responses. It does not allocate on well-formed responses.
func readResponse(r *bufio.Reader, buf []byte) (response, []byte, error) {
	for {
		res, length, chunked, err := readHead(r)
		if err != nil {
			return res, buf, err
		}
		if res.status >= 100 && res.status < 200 {
			continue // interim (100 Continue, 103 Early Hints): the answer follows
		}
		buf = buf[:0]
		switch {
		case res.status == 204 || res.status == 304:
		case chunked:
			buf, err = readChunked(r, buf)
		case length >= 0:
			buf, err = readLength(r, buf, length)
		default: // no framing: the body ends with the connection
			res.close = true
			buf, err = readToEOF(r, buf)
		}
		res.body = buf
		return res, buf, err
	}
}

// readHead reads the status line and the headers. length is -1 when there
// is no Content-Length.
func readHead(r *bufio.Reader) (res response, length int64, chunked bool, err error) {
	line, err := readLine(r)
	if err != nil {
		return res, 0, false, err
	}
	// HTTP/1.1 200 OK
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return res, 0, false, malformed("status line %q", truncate(line))
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return res, 0, false, malformed("status line %q", truncate(line))
		}
		res.status = res.status*10 + int(c-'0')
	}
	if res.status < 100 {
		return res, 0, false, malformed("status line %q", truncate(line))
	}
	http10 := line[7] == '0'
	keepAlive := false
	length = -1
	for {
		line, err := readLine(r)
		if err != nil {
			return res, 0, false, err
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return res, 0, false, malformed("header line %q", truncate(line))
		}
		value = bytes.Trim(value, " \t")
		switch {
		case equalFold(name, "content-length"):
			n, ok := parseDecimal(value)
			if !ok || (length >= 0 && n != length) {
				return res, 0, false, malformed("Content-Length %q", truncate(value))
			}
			length = n
		case equalFold(name, "transfer-encoding"):
			// chunked is the last coding when present (RFC 9112, 6.1).
			chunked = len(value) >= 7 && equalFold(value[len(value)-7:], "chunked")
		case equalFold(name, "connection"):
			res.close = res.close || hasToken(value, "close")
			keepAlive = keepAlive || hasToken(value, "keep-alive")
		}
	}
	if http10 && !keepAlive {
		res.close = true
	}
	return res, length, chunked, nil
}

// readLine returns the next line without its CRLF or LF, valid until the
// next read. A line longer than r's buffer is malformed.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, malformed("line longer than %d bytes", r.Size())
	}
	if err == io.EOF && len(line) > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func readLength(r *bufio.Reader, buf []byte, n int64) ([]byte, error) {
	keep := min(n, maxKeptBody)
	buf = grow(buf, int(keep))
	if _, err := io.ReadFull(r, buf[:keep]); err != nil {
		return buf[:0], unexpected(err)
	}
	if _, err := r.Discard(int(n - keep)); err != nil {
		return buf[:keep], unexpected(err)
	}
	return buf[:keep], nil
}

func readChunked(r *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		line, err := readLine(r)
		if err != nil {
			return buf, unexpected(err)
		}
		size, ok := parseChunkSize(line)
		if !ok {
			return buf, malformed("chunk size %q", truncate(line))
		}
		if size == 0 {
			for { // trailers, up to the empty line
				line, err := readLine(r)
				if err != nil {
					return buf, unexpected(err)
				}
				if len(line) == 0 {
					return buf, nil
				}
			}
		}
		if buf, err = appendFrom(r, buf, size); err != nil {
			return buf, err
		}
		if line, err = readLine(r); err != nil {
			return buf, unexpected(err)
		}
		if len(line) != 0 {
			return buf, malformed("chunk data longer than its size")
		}
	}
}

func readToEOF(r *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		buf = grow(buf, len(buf)+4096)
		n, err := r.Read(buf[len(buf) : len(buf)+min(4096, maxKeptBody-len(buf))])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) >= maxKeptBody {
			_, err := io.Copy(io.Discard, r)
			return buf, err
		}
	}
}

// appendFrom appends n bytes of r to buf, keeping at most maxKeptBody in all.
func appendFrom(r *bufio.Reader, buf []byte, n int64) ([]byte, error) {
	keep := min(n, int64(maxKeptBody-len(buf)))
	buf = grow(buf, len(buf)+int(keep))
	if _, err := io.ReadFull(r, buf[len(buf):len(buf)+int(keep)]); err != nil {
		return buf, unexpected(err)
	}
	buf = buf[:len(buf)+int(keep)]
	if _, err := r.Discard(int(n - keep)); err != nil {
		return buf, unexpected(err)
	}
	return buf, nil
}

// grow returns buf with a capacity of at least n, its content kept.
func grow(buf []byte, n int) []byte {
	if cap(buf) >= n {
		return buf
	}
	return append(buf[:cap(buf)], make([]byte, n-cap(buf))...)[:len(buf)]
}

// unexpected turns the end of the stream inside a response into
// io.ErrUnexpectedEOF: the response was cut.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseDecimal reads a non-negative decimal of at most 15 digits.
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseChunkSize reads "1a;ext=v": a hexadecimal size, then extensions.
func parseChunkSize(line []byte) (int64, bool) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 12 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

// equalFold reports whether b equals the lower-case ASCII s, ignoring case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// hasToken reports whether the comma-separated list v holds token, in any
// case.
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		item, rest, _ := bytes.Cut(v, []byte(","))
		if equalFold(bytes.Trim(item, " \t"), token) {
			return true
		}
		v = rest
	}
	return false
}

// truncate bounds what an error quotes of a response.
func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
