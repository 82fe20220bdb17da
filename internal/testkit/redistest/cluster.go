package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// NodeTimeout is the cluster-node-timeout of the clusters StartCluster
// builds: how long a primary must be unreachable before its replica takes
// over. Short, so failover tests take seconds.
const NodeTimeout = time.Second

// Cluster is a Redis Cluster of private redis-server processes on loopback,
// built by StartCluster and killed when the test ends.
type Cluster struct {
	Nodes []*Node
}

// Node is one redis-server of a Cluster.
type Node struct {
	Addr   string
	dir    string
	cmd    *exec.Cmd
	done   chan struct{}
	client *redis.Client
}

// StartCluster starts primaries×(1+replicas) redis-server processes with
// cluster mode on and joins them with `redis-cli --cluster create` (or, for
// a single primary without replicas, gives it every slot), then
// waits until every node reports cluster_state:ok. Queries on the slots of
// surviving primaries keep working while one is down
// (cluster-require-full-coverage no), as in a limiter deployment.
func StartCluster(tb testing.TB, primaries, replicas int) *Cluster {
	tb.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			testkit.Unavailable(tb, "%s not found: install Debian's redis-server package (it brings both)", bin)
		}
	}
	c := &Cluster{}
	for range primaries * (1 + replicas) {
		c.Nodes = append(c.Nodes, startNode(tb))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case primaries >= 3:
		args := []string{"--cluster", "create"}
		args = append(args, c.Addrs()...)
		args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
		if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
			tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
		}
	case primaries == 1 && replicas == 0:
		// redis-cli creates clusters of three primaries or more; one node
		// takes every slot itself.
		if err := c.Nodes[0].client.ClusterAddSlotsRange(ctx, 0, 16383).Err(); err != nil {
			tb.Fatalf("cluster addslotsrange: %v", err)
		}
	default:
		tb.Fatalf("StartCluster: %d primaries with %d replicas each: want 3 or more primaries, or one alone", primaries, replicas)
	}
	c.WaitHealthy(tb, 30*time.Second)
	c.waitReplicasOnline(tb, replicas, 30*time.Second)
	return c
}

// waitReplicasOnline waits until every primary has replicas replicas
// online. cluster_state:ok comes earlier, while a node that is to become a
// replica is still an empty primary: a test that writes then would find
// nothing to wait for in WaitReplicated, and a failover would lose its write.
func (c *Cluster) waitReplicasOnline(tb testing.TB, replicas int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for _, p := range c.Primaries() {
		for len(p.onlineReplicaOffsets()) < replicas {
			if time.Now().After(deadline) {
				tb.Fatalf("%s has fewer than %d replicas online after %v", p.Addr, replicas, timeout)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// startNode starts one cluster-enabled redis-server on a free port whose
// cluster bus port (port+10000) is free too.
func startNode(tb testing.TB) *Node {
	tb.Helper()
	n := &Node{dir: tb.TempDir(), done: make(chan struct{})}
	port := freeClusterPort(tb)
	n.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	n.cmd = exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(n.dir, "nodes.conf"),
		"--cluster-node-timeout", strconv.FormatInt(NodeTimeout.Milliseconds(), 10),
		"--cluster-require-full-coverage", "no", "--cluster-announce-ip", "127.0.0.1",
		"--dir", n.dir, "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0",
		"--logfile", filepath.Join(n.dir, "redis.log"))
	if err := n.cmd.Start(); err != nil {
		tb.Fatalf("redis-server: %v", err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	n.client = redis.NewClient(&redis.Options{Addr: n.Addr, DialTimeout: 500 * time.Millisecond,
		ReadTimeout: time.Second, MaxRetries: -1, PoolSize: 4})
	tb.Cleanup(func() {
		_ = n.client.Close()
		n.Kill()
		if tb.Failed() {
			log, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			tb.Logf("--- redis-server %s log (last 3000 bytes) ---\n%s", n.Addr, tail(log, 3000))
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for n.client.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			tb.Fatalf("redis-server on %s does not answer after 5s", n.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

func freeClusterPort(tb testing.TB) int {
	tb.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port
	}
	tb.Fatal("no free port pair (port, port+10000) for a cluster node")
	return 0
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Addrs are the nodes' host:port, the seed list of a cluster client.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Client returns a cluster client of c, closed when the test ends, that
// fails the test as Client does on an absolute expiry that has passed.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), DialTimeout: 500 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 32})
	guardExpiries(tb, cc)
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Node returns the node listening on addr, or nil.
func (c *Cluster) Node(addr string) *Node {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// PrimaryOf returns the node serving key's slot, as the live nodes see it.
func (c *Cluster) PrimaryOf(tb testing.TB, key string) *Node {
	tb.Helper()
	ctx := context.Background()
	for _, n := range c.Nodes {
		if !n.Alive() {
			continue
		}
		slot, err := n.Client().ClusterKeySlot(ctx, key).Result()
		if err != nil {
			continue
		}
		//lint:ignore SA1019 CLUSTER SLOTS names each range's primary first, what this asks; CLUSTER SHARDS would need its roles and health read
		slots, err := n.Client().ClusterSlots(ctx).Result()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				if p := c.Node(s.Nodes[0].Addr); p != nil {
					return p
				}
			}
		}
	}
	tb.Fatalf("no live node knows which primary serves %q", key)
	return nil
}

// Primaries returns the nodes that are primaries now, as the live nodes see
// it, in node order.
func (c *Cluster) Primaries() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.Alive() && n.Role() == "master" {
			out = append(out, n)
		}
	}
	return out
}

// WaitHealthy waits until every live node reports cluster_state:ok and sees
// every slot served by a live primary (after a failover: the replica has
// been promoted and the others know it).
func (c *Cluster) WaitHealthy(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := c.unhealthy()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redis cluster not healthy after %v: %s", timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unhealthy says why the cluster is not healthy yet, or "" when it is.
func (c *Cluster) unhealthy() string {
	ctx := context.Background()
	for _, n := range c.Nodes {
		if !n.Alive() {
			continue
		}
		cl := n.Client()
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil {
			return n.Addr + ": " + err.Error()
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return n.Addr + " reports " + strings.ReplaceAll(strings.TrimSpace(firstLines(info, 3)), "\r\n", ", ")
		}
		if role, link := n.replication("role"), n.replication("master_link_status"); role == "slave" && link != "up" {
			return n.Addr + " is a replica whose link to its primary is " + link
		}
		//lint:ignore SA1019 as in PrimaryOf: the primary of each range, first
		slots, err := cl.ClusterSlots(ctx).Result()
		if err != nil {
			return n.Addr + ": " + err.Error()
		}
		for _, s := range slots {
			if p := c.Node(s.Nodes[0].Addr); p == nil || !p.Alive() {
				return fmt.Sprintf("%s maps slots %d-%d to %s, which is down", n.Addr, s.Start, s.End, s.Nodes[0].Addr)
			}
		}
	}
	return ""
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// Client is a plain client of this node alone (no redirections), closed
// when the test ends.
func (n *Node) Client() *redis.Client { return n.client }

// Role is the node's replication role ("master" or "slave"), or "" when it
// does not answer.
func (n *Node) Role() string { return n.replication("role") }

// replication returns one field of the node's INFO replication.
func (n *Node) replication(field string) string { return Info(n.client, "replication", field) }

// Info returns one field of an INFO section of the server c talks to, ""
// when it does not answer or has no such field.
func Info(c *redis.Client, section, field string) string {
	s, err := c.Info(context.Background(), section).Result()
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// WaitReplicated waits until every replica of every live primary has
// acknowledged all the primary's writes, so that a primary killed next
// loses none. Replicas acknowledge once a second (REPLCONF ACK).
func (c *Cluster) WaitReplicated(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for _, p := range c.Primaries() {
		for !p.replicated() {
			if time.Now().After(deadline) {
				tb.Fatalf("replicas of %s not in sync after %v", p.Addr, timeout)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// replicated reports whether every replica of this primary is online and
// acknowledged its replication offset.
func (n *Node) replicated() bool {
	offset := n.replication("master_repl_offset")
	acked := n.onlineReplicaOffsets()
	if offset == "" || len(acked) != n.connectedReplicas() {
		return false
	}
	for _, a := range acked {
		if a != offset {
			return false
		}
	}
	return true
}

// connectedReplicas is INFO replication's connected_slaves, -1 when the
// node does not answer.
func (n *Node) connectedReplicas() int {
	v, err := strconv.Atoi(n.replication("connected_slaves"))
	if err != nil {
		return -1
	}
	return v
}

// onlineReplicaOffsets returns the acknowledged offset of each replica
// whose state is online (INFO lines "slaveN:ip=...,state=online,offset=N,...").
func (n *Node) onlineReplicaOffsets() []string {
	s, err := n.Client().Info(context.Background(), "replication").Result()
	if err != nil {
		return nil
	}
	var acked []string
	for line := range strings.SplitSeq(s, "\r\n") {
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, ",state=online,") {
			continue
		}
		if _, rest, ok := strings.Cut(line, ",offset="); ok {
			ack, _, _ := strings.Cut(rest, ",")
			acked = append(acked, ack)
		}
	}
	return acked
}

// PID is the redis-server's process id.
func (n *Node) PID() int { return n.cmd.Process.Pid }

// Alive reports whether the process still runs.
func (n *Node) Alive() bool {
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Pause stops the process (SIGSTOP): a node that hangs, holding its
// connections open without answering. Resume continues it.
func (n *Node) Pause()  { _ = n.cmd.Process.Signal(syscall.SIGSTOP) }
func (n *Node) Resume() { _ = n.cmd.Process.Signal(syscall.SIGCONT) }

// Kill sends SIGKILL and waits for the exit: a crash, nothing flushed.
func (n *Node) Kill() {
	_ = n.cmd.Process.Kill()
	<-n.done
}

// ReplicaOf returns the node replicating primary.
func (c *Cluster) ReplicaOf(tb testing.TB, primary *Node) *Node {
	tb.Helper()
	_, port, _ := net.SplitHostPort(primary.Addr)
	for _, n := range c.Nodes {
		info, err := n.Client().Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+port+"\r\n") {
			return n
		}
	}
	tb.Fatalf("no replica of %s", primary.Addr)
	return nil
}
