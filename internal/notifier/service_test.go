package notifier

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/ratewarden/ratewarden/internal/digest"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// fakeReader serves messages in a fixed order, each partition's high-water
// mark its message count, and records the commits.
type fakeReader struct {
	msgs []event.Message
	hwm  map[int]int64
	next int

	mu        sync.Mutex
	committed map[int]int64 // partition -> next offset
}

func newFakeReader(msgs []event.Message) *fakeReader {
	r := &fakeReader{msgs: msgs, hwm: map[int]int64{}, committed: map[int]int64{}}
	for _, m := range msgs {
		r.hwm[m.Partition] = max(r.hwm[m.Partition], m.Offset+1)
	}
	return r
}

func (r *fakeReader) Fetch(ctx context.Context) (event.Message, int64, error) {
	if r.next == len(r.msgs) {
		<-ctx.Done()
		return event.Message{}, 0, ctx.Err()
	}
	m := r.msgs[r.next]
	r.next++
	return m, r.hwm[m.Partition], nil
}

func (r *fakeReader) Commit(_ context.Context, msgs []event.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.committed[m.Partition] = max(r.committed[m.Partition], m.Offset+1)
	}
	return nil
}

func (r *fakeReader) Lag() int64 { return 0 }

func (r *fakeReader) done() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, end := range r.hwm {
		if r.committed[p] != end {
			return false
		}
	}
	return true
}

// keysOf runs a service over msgs, served in that order, until every
// offset is committed, and returns the idempotency keys and counts its
// receiver got, sorted.
func keysOf(t *testing.T, msgs []event.Message) []string {
	t.Helper()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Count int `json:"count"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		mu.Lock()
		got = append(got, fmt.Sprintf("%s %d", r.Header.Get("Idempotency-Key"), body.Count))
		mu.Unlock()
	}))
	defer srv.Close()
	s, err := New(Config{Receivers: []Receiver{{Name: "r", URL: srv.URL, Format: digest.FormatJSON, Examples: 5}},
		Delay: time.Second, Grace: 50 * time.Millisecond, MaxPending: 1000, Timeout: time.Second, MaxBackoff: 10 * time.Millisecond},
		zaptest.NewLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rd := newFakeReader(msgs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, rd) }()
	testkit.WaitFor(t, time.Minute, "every offset committed", rd.done)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Sorted(slices.Values(got))
}

// The digests of the same messages are the same, with the same keys,
// whatever order the partitions' messages are read in (as after a restart,
// when the backlog of every partition is read at once): three windows of
// bans on three partitions, read partition by partition and interleaved.
func TestDigestsDoNotDependOnTheReadingOrder(t *testing.T) {
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	var byPartition [3][]event.Message
	for i := range 90 {
		p := i % 3
		at := base.Add(time.Duration(i/30) * time.Second).Add(time.Duration(i%30) * 10 * time.Millisecond) // windows of 30
		b := event.Ban{BanID: fmt.Sprintf("b%d", i), TS: at, Action: event.ActionBan, Scope: event.ScopeIP,
			Subject: fmt.Sprintf("192.0.2.%d", i), Reason: []string{"scan", "credential_stuffing"}[i%2]}
		v, err := event.EncodeBan(b)
		if err != nil {
			t.Fatal(err)
		}
		byPartition[p] = append(byPartition[p], event.Message{Partition: p, Offset: int64(len(byPartition[p])), Time: at, Value: v})
	}
	sequential := slices.Concat(byPartition[2][:], byPartition[0][:], byPartition[1][:])
	var interleaved []event.Message
	for i := range byPartition[0] {
		for p := range byPartition {
			interleaved = append(interleaved, byPartition[p][i])
		}
	}
	first, second := keysOf(t, sequential), keysOf(t, interleaved)
	if len(first) != 6 {
		t.Fatalf("%d digests, want 6 (3 windows × 2 scenarios): %v", len(first), first)
	}
	if !slices.Equal(first, second) {
		t.Errorf("read partition by partition: %v\ninterleaved: %v", first, second)
	}
}

// A ban stamped in the future is sent in a digest of its own: the honest
// bans of its scenario, read after it on its partition, keep the digests,
// and keys, they have without it.
func TestMisdatedBanDoesNotChangeTheHonestDigests(t *testing.T) {
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	encode := func(id string, at time.Time) []byte {
		v, err := event.EncodeBan(event.Ban{BanID: id, TS: at, Action: event.ActionBan, Scope: event.ScopeIP, Subject: "192.0.2.1", Reason: "scan"})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	future := base.Add(24 * time.Hour)
	var honest []event.Message
	for i := range 6 {
		at := base.Add(time.Duration(i) * 300 * time.Millisecond)
		honest = append(honest, event.Message{Partition: 0, Offset: int64(i + 1), Time: at, Value: encode(fmt.Sprint("b", i), at)})
	}
	withMisdated := append([]event.Message{{Partition: 0, Offset: 0, Time: future, Value: encode("future", future)}}, honest...)
	for i := range honest {
		honest[i].Offset-- // the same bans, without the misdated one before them
	}
	alone, beside := keysOf(t, honest), keysOf(t, withMisdated)
	var extra []string
	for _, k := range beside {
		if !slices.Contains(alone, k) {
			extra = append(extra, k)
		}
	}
	if len(beside) != len(alone)+1 || len(extra) != 1 || extra[0][len(extra[0])-2:] != " 1" {
		t.Errorf("honest digests %v; beside a misdated ban %v, want the same plus one digest of 1", alone, beside)
	}
}
