package console

import (
	"container/list"
	"crypto/rand"
	"encoding/base64"
	"sync"
	"time"
)

// session is one logged-in user.
type session struct {
	id       string
	user     User
	csrf     string // the token every form of the session carries
	created  time.Time
	lastUsed time.Time
	elem     *list.Element
}

// sessions holds the console's sessions in memory: at most perUser a user,
// a new one past it ending that user's least recently used (logging in
// again and again ends no one else's session); and at most max in all, a
// last bound on memory that ends the least recently used of any user (set
// it to perUser times the users or more, as the default is). A session
// ends when unused for idle, and in any case max age after its login.
type sessions struct {
	mu      sync.Mutex
	byID    map[string]*session
	lru     *list.List // front: most recently used
	ofUser  map[string]int
	max     int
	perUser int
	idle    time.Duration
	maxAge  time.Duration
	now     func() time.Time
}

func newSessions(limit, perUser int, idle, maxAge time.Duration, now func() time.Time) *sessions {
	return &sessions{byID: map[string]*session{}, lru: list.New(), ofUser: map[string]int{},
		max: limit, perUser: max(perUser, 1), idle: idle, maxAge: maxAge, now: now}
}

// randomToken returns 256 random bits, URL-safe.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics instead)
	return base64.RawURLEncoding.EncodeToString(b)
}

// start opens a session for user and returns it.
func (s *sessions) start(user User) *session {
	now := s.now()
	ss := &session{id: randomToken(), user: user, csrf: randomToken(), created: now, lastUsed: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ofUser[user.Name] >= s.perUser {
		s.drop(s.leastRecentOf(user.Name))
	}
	for len(s.byID) >= s.max {
		s.drop(s.lru.Back().Value.(*session))
	}
	ss.elem = s.lru.PushFront(ss)
	s.byID[ss.id] = ss
	s.ofUser[user.Name]++
	return ss
}

// leastRecentOf returns the least recently used session of the user named
// name, who has one.
func (s *sessions) leastRecentOf(name string) *session {
	for e := s.lru.Back(); ; e = e.Prev() {
		if ss := e.Value.(*session); ss.user.Name == name {
			return ss
		}
	}
}

// get returns the live session of id and marks it used; an expired one is
// ended.
func (s *sessions) get(id string) (session, bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.byID[id]
	if !ok {
		return session{}, false
	}
	if now.Sub(ss.lastUsed) >= s.idle || now.Sub(ss.created) >= s.maxAge {
		s.drop(ss)
		return session{}, false
	}
	ss.lastUsed = now
	s.lru.MoveToFront(ss.elem)
	return *ss, true
}

// end ends the session of id, if any.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss, ok := s.byID[id]; ok {
		s.drop(ss)
	}
}

func (s *sessions) drop(ss *session) {
	s.lru.Remove(ss.elem)
	delete(s.byID, ss.id)
	if s.ofUser[ss.user.Name]--; s.ofUser[ss.user.Name] <= 0 {
		delete(s.ofUser, ss.user.Name)
	}
}

// len is the number of sessions held.
func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}
