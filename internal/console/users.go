package console

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// Role is what a console user may do.
type Role string

// The roles: a viewer reads every page; an operator also bans, lifts and
// extends.
const (
	Viewer   Role = "viewer"
	Operator Role = "operator"
)

// maxUserName bounds a console user's name, which the audit trail records.
const maxUserName = 64

// User is one console user.
type User struct {
	Name string
	Role Role
	hash []byte
}

// Users are the console's users by name, from the users file.
type Users struct {
	byName map[string]User
	// decoy is compared against for an unknown name, so a login takes as
	// long whether the name exists or not: the hash of the dearest cost in
	// the file (an unknown name costs as much as the slowest user; a user
	// of a cheaper cost is a warning at start, WeakUsers).
	decoy     []byte
	decoyCost int
}

// ParseUsers reads the users file: one user a line, "name:role:hash", the
// hash bcrypt's ($2a$, $2b$ or $2y$, as `htpasswd -nbB` writes it); blank
// lines and lines starting with # are skipped. Errors give the line number,
// never a hash.
func ParseUsers(r io.Reader) (*Users, error) {
	u := &Users{byName: map[string]User{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, err := parseUser(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if _, dup := u.byName[user.Name]; dup {
			return nil, fmt.Errorf("line %d: user %q listed twice", n, user.Name)
		}
		u.byName[user.Name] = user
		if cost, _ := bcrypt.Cost(user.hash); cost > u.decoyCost {
			u.decoy, u.decoyCost = user.hash, cost
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(u.byName) == 0 {
		return nil, fmt.Errorf("no users: expected lines of name:role:bcrypt-hash")
	}
	return u, nil
}

func parseUser(line string) (User, error) {
	name, rest, ok1 := strings.Cut(line, ":")
	role, hash, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return User{}, fmt.Errorf("expected name:role:bcrypt-hash")
	}
	if name == "" || len(name) > maxUserName || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return User{}, fmt.Errorf("name: 1 to %d bytes without spaces or control characters", maxUserName)
	}
	if Role(role) != Viewer && Role(role) != Operator {
		return User{}, fmt.Errorf("user %q: role %q, expected viewer or operator", name, role)
	}
	if _, err := bcrypt.Cost([]byte(hash)); err != nil {
		return User{}, fmt.Errorf("user %q: expected a bcrypt hash (htpasswd -nbBC 10 name password)", name)
	}
	return User{Name: name, Role: Role(role), hash: []byte(hash)}, nil
}

// Authenticate returns the user whose name and password these are.
func (u *Users) Authenticate(name, password string) (User, bool) {
	user, known := u.byName[name]
	hash := user.hash
	if !known {
		hash = u.decoy
	}
	match := bcrypt.CompareHashAndPassword(hash, []byte(password)) == nil
	return user, known && match
}

// RecommendedCost is the bcrypt cost a users file should use (`htpasswd
// -nbBC 10`, `console user`): htpasswd's default, 5, is 32 times cheaper
// to guess offline, and a login of a cheap user is measurably faster than
// one of an unknown name.
const RecommendedCost = 10

// WeakUsers returns the names of the users whose hash costs less than
// RecommendedCost, sorted.
func (u *Users) WeakUsers() []string {
	var weak []string
	for name, user := range u.byName {
		if cost, _ := bcrypt.Cost(user.hash); cost < RecommendedCost {
			weak = append(weak, name)
		}
	}
	slices.Sort(weak)
	return weak
}

// Lookup returns the user of name.
func (u *Users) Lookup(name string) (User, bool) {
	user, ok := u.byName[name]
	return user, ok
}

// UserLine returns the users file's line of a user with this password,
// hashed with bcrypt's default cost; it refuses what ParseUsers would.
func UserLine(name string, role Role, password string) (string, error) {
	if password == "" || len(password) > 72 {
		return "", fmt.Errorf("password: 1 to 72 bytes (bcrypt reads no more)")
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), RecommendedCost)
	if err != nil {
		return "", err
	}
	line := name + ":" + string(role) + ":" + string(hash)
	if _, err := parseUser(line); err != nil {
		return "", err
	}
	return line, nil
}
