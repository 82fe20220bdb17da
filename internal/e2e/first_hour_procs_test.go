package e2e

import (
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// procID is a process as /proc shows it: its pid and its start time, so a
// pid reused by a later process is not taken for it.
type procID struct {
	pid   int
	start string
	name  string
}

// stat returns the fields of /proc/pid/stat after the command name, and the
// name: state, ppid, ..., start time (index 19).
func stat(pid int) (fields []string, name string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, "", false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return nil, "", false
	}
	fields = strings.Fields(s[end+1:])
	if len(fields) < 20 {
		return nil, "", false
	}
	return fields, s[open+1 : end], true
}

// alive reports whether the process still runs (a zombie does not).
func (p procID) alive() bool {
	f, _, ok := stat(p.pid)
	return ok && f[19] == p.start && f[0] != "Z"
}

// pids lists the processes of the machine.
func pids(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc to find processes in: %v", err)
	}
	var list []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			list = append(list, pid)
		}
	}
	return list
}

// descendants returns the processes below root: make run's children keep
// their parent while they run in sessions of their own.
func descendants(t *testing.T, root int) []procID {
	t.Helper()
	children := map[int][]procID{}
	for _, pid := range pids(t) {
		f, name, ok := stat(pid)
		if !ok {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], procID{pid: pid, start: f[19], name: name})
	}
	var out []procID
	queue := []int{root}
	for len(queue) > 0 {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
		queue = queue[1:]
	}
	return out
}

// listening returns the TCP addresses the processes listen on.
func listening(t *testing.T, procs []procID) map[string]bool {
	t.Helper()
	sockets := map[string]bool{}
	for _, p := range procs {
		fds, _ := filepath.Glob("/proc/" + strconv.Itoa(p.pid) + "/fd/*")
		for _, fd := range fds {
			if link, err := os.Readlink(fd); err == nil && strings.HasPrefix(link, "socket:[") {
				sockets[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
			}
		}
	}
	addrs := map[string]bool{}
	for inode, addr := range tcpListeners(t) {
		if sockets[inode] {
			addrs[addr] = true
		}
	}
	return addrs
}

// tcpListeners returns the machine's TCP sockets in LISTEN state, by inode.
func tcpListeners(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" { // 0A: LISTEN
				continue
			}
			if addr, ok := procNetAddr(f[1]); ok {
				out[f[9]] = addr
			}
		}
	}
	return out
}

// procNetAddr decodes an address of /proc/net/tcp{,6}: the IP in 32-bit
// words of host (little-endian) order, then the port in hex.
func procNetAddr(s string) (string, bool) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(ipHex)
	port, perr := strconv.ParseUint(portHex, 16, 16)
	if !ok || err != nil || perr != nil || len(raw)%4 != 0 {
		return "", false
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	ip := net.IP(raw)
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port))), true
}

// byAddr inverts a map of addresses by variable.
func byAddr(addrs map[string]string) map[string]string {
	out := map[string]string{}
	for name, addr := range addrs {
		out[addr] = name
	}
	return out
}

// assertStopped fails the test if a process of stack, or any process
// working in dir (where make run starts them all), still runs, or if
// anything listens on a port of used (address -> what it was).
func assertStopped(t *testing.T, dir string, stack []procID, used map[string]string) {
	t.Helper()
	for _, p := range stack {
		if p.alive() {
			t.Errorf("%s (pid %d) survived make run", p.name, p.pid)
		}
	}
	for _, pid := range pids(t) {
		if cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			if f, name, ok := stat(pid); ok && f[0] != "Z" {
				t.Errorf("%s (pid %d), working in the clone, survived make run", name, pid)
			}
		}
	}
	listeners := tcpListeners(t)
	for _, addr := range listeners {
		_, port, _ := net.SplitHostPort(addr)
		for used, what := range used {
			if _, p, _ := net.SplitHostPort(used); p == port {
				t.Errorf("%s listens on port %s after make run stopped (%s)", addr, port, what)
			}
		}
	}
}
