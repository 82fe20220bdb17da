package main

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

const decisionBody = `{"allowed":false,"reason":"rate_limited","rule_id":"login-per-ip","algorithm":"sliding_window","limit":5,"remaining":0,"reset_after_ms":740,"retry_after_ms":740,"mode":"redis","shadow":false,"event_id":"e1"}` + "\n"

func TestReadResponse(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		status    int
		body      string
		close     bool
		wantErr   error  // matched with errors.Is; nil and no wantProto: no error
		wantProto string // substring of a *protocolError
		rest      string // what must remain unread
	}{
		{name: "content-length, keep-alive", status: 200, body: decisionBody, rest: "NEXT",
			in: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(decisionBody)) + "\r\n\r\n" + decisionBody + "NEXT"},
		{name: "header names in any case, LF line ends", status: 429, body: "abc", rest: "x",
			in: "HTTP/1.1 429 Too Many Requests\ncontent-LENGTH:  3 \n\nabcx"},
		{name: "chunked with extension and trailer", status: 200, body: "hello, world", rest: "NEXT",
			in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT"},
		{name: "connection close", status: 200, body: "ok", close: true,
			in: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"},
		{name: "connection tokens", status: 200, body: "ok", close: true,
			in: "HTTP/1.1 200 OK\r\nConnection: Upgrade, Close\r\nContent-Length: 2\r\n\r\nok"},
		{name: "HTTP/1.0 closes by default", status: 200, body: "ok", close: true,
			in: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{name: "HTTP/1.0 keep-alive", status: 200, body: "ok",
			in: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"},
		{name: "no framing: body to the end", status: 200, body: "all of it", close: true,
			in: "HTTP/1.1 200 OK\r\n\r\nall of it"},
		{name: "interim 100 skipped", status: 200, body: "ok",
			in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{name: "204 has no body", status: 204, rest: "NEXT",
			in: "HTTP/1.1 204 No Content\r\n\r\nNEXT"},
		{name: "status line without reason", status: 503, body: "",
			in: "HTTP/1.1 503\r\nContent-Length: 0\r\n\r\n"},
		{name: "malformed status line", wantProto: "status line", in: "HTTP/1.1 2OO OK\r\n\r\n"},
		{name: "not HTTP", wantProto: "status line", in: "SSH-2.0-OpenSSH\r\n"},
		{name: "status below 100", wantProto: "status line", in: "HTTP/1.1 099 Odd\r\n\r\n"},
		{name: "header without colon", wantProto: "header line", in: "HTTP/1.1 200 OK\r\nbroken\r\n\r\n"},
		{name: "bad content-length", wantProto: "Content-Length", in: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"},
		{name: "conflicting content-lengths", wantProto: "Content-Length", in: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"},
		{name: "bad chunk size", wantProto: "chunk size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
		{name: "chunk longer than its size", wantProto: "chunk data", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n"},
		{name: "body cut short", wantErr: io.ErrUnexpectedEOF, in: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"},
		{name: "headers cut short", wantErr: io.ErrUnexpectedEOF, in: "HTTP/1.1 200 OK\r\nContent-Len"},
		{name: "closed before the response", wantErr: io.EOF, in: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bufio.NewReaderSize(strings.NewReader(tt.in), 4096)
			res, _, err := readResponse(r, nil)
			var proto *protocolError
			switch {
			case tt.wantProto != "":
				if !errors.As(err, &proto) || !strings.Contains(err.Error(), tt.wantProto) {
					t.Fatalf("error = %v, want a protocol error about %q", err, tt.wantProto)
				}
				return
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error = %v, want %v", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if res.status != tt.status || string(res.body) != tt.body || res.close != tt.close {
				t.Fatalf("got status %d body %q close %v; want %d %q %v", res.status, res.body, res.close, tt.status, tt.body, tt.close)
			}
			if rest, _ := io.ReadAll(r); string(rest) != tt.rest {
				t.Fatalf("left unread %q, want %q", rest, tt.rest)
			}
		})
	}
}

func TestReadResponseKeepsBoundedBody(t *testing.T) {
	big := strings.Repeat("x", maxKeptBody+1000)
	for _, in := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(big)) + "\r\n\r\n" + big + "NEXT",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(big)), 16) + "\r\n" + big + "\r\n0\r\n\r\nNEXT",
	} {
		r := bufio.NewReader(strings.NewReader(in))
		res, _, err := readResponse(r, nil)
		if err != nil || len(res.body) != maxKeptBody {
			t.Fatalf("kept %d bytes, err %v; want %d", len(res.body), err, maxKeptBody)
		}
		if rest, _ := io.ReadAll(r); string(rest) != "NEXT" {
			t.Fatalf("left unread %q, want the next response", rest)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		err     errClass
		allowed bool
		reason  reason
	}{
		{"denied decision", 200, decisionBody, errNone, false, reasonRateLimited},
		{"allowed decision", 200, `{"allowed":true,"reason":"ok","rule_id":"r"}`, errNone, true, reasonOK},
		{"spaced JSON, banned", 200, `{ "reason" : "banned", "allowed" : false }`, errNone, false, reasonBanned},
		{"shadow denial is allowed", 200, `{"allowed":true,"reason":"rate_limited","shadow":true}`, errNone, true, reasonRateLimited},
		{"unknown reason", 200, `{"allowed":true,"reason":"new_one"}`, errNone, true, reasonOther},
		{"429 without body", 429, ``, errNone, false, reasonRateLimited},
		{"200 without verdict", 200, `{"status":"ok"}`, errBody, false, reasonOther},
		{"400", 400, `{"error":"ip: required"}`, errStatus4xx, false, reasonOther},
		{"413", 413, ``, errStatus4xx, false, reasonOther},
		{"503", 503, `{"error":"rule r cannot be decided"}`, errStatus5xx, false, reasonOther},
		{"301", 301, ``, errStatusMisc, false, reasonOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o outcome
			classify(&o, response{status: tt.status, body: []byte(tt.body)})
			if o.status != tt.status || o.err != tt.err || o.allowed != tt.allowed || o.reason != tt.reason {
				t.Fatalf("got status %d err %s allowed %v reason %s; want %d %s %v %s",
					o.status, o.err, o.allowed, o.reason, tt.status, tt.err, tt.allowed, tt.reason)
			}
		})
	}
}
