package config

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// load runs process p's loader through getenv.
func load(p Process, getenv func(string) string) error {
	var err error
	switch p {
	case LimiterProcess:
		_, err = LoadLimiter(getenv)
	case DetectorProcess:
		_, err = LoadDetector(getenv)
	case ArchiverProcess:
		_, err = LoadArchiver(getenv)
	case NotifierProcess:
		_, err = LoadNotifier(getenv)
	case DevKafkaProcess:
		_, err = LoadDevKafka(nil, getenv)
	case ConsoleProcess:
		_, err = LoadConsole(getenv)
	default:
		panic("no loader for " + p)
	}
	return err
}

// Every row is complete, and no process reads two rows of one name.
func TestTableRows(t *testing.T) {
	for _, v := range table {
		switch {
		case v.Name == "" || strings.ToUpper(v.Name) != v.Name || strings.ContainsAny(v.Name, " -"):
			t.Errorf("row %q: want an upper-case variable name", v.Name)
		case strings.TrimSpace(v.Meaning) == "" || strings.Contains(v.Meaning, "\n"):
			t.Errorf("%s: want a meaning on one line", v.Name)
		case len(v.Readers) == 0:
			t.Errorf("%s: read by no process", v.Name)
		case (v.load == nil) != v.Runtime:
			t.Errorf("%s: a row has a parser unless the Go runtime reads it", v.Name)
		case (v.Flag != "") != v.ReadBy(DevKafkaProcess):
			t.Errorf("%s: flags mirror devkafka's variables, and only those", v.Name)
		case v.defaultFunc != nil && (v.Default != "" || v.DefaultDoc == ""):
			t.Errorf("%s: a computed default is documented in DefaultDoc, with no Default", v.Name)
		}
		for _, p := range v.Readers {
			if !slices.Contains(Processes, p) {
				t.Errorf("%s: unknown process %q", v.Name, p)
			}
		}
	}
	for _, p := range Processes {
		seen := map[string]bool{}
		for _, v := range Vars(p) {
			if seen[v.Name] {
				t.Errorf("the %s reads two rows named %s", p, v.Name)
			}
			seen[v.Name] = true
		}
		if !seen["LISTEN_ADDR"] || !seen["LOG_LEVEL"] {
			t.Errorf("the %s reads no LISTEN_ADDR or LOG_LEVEL", p)
		}
	}
}

// A process's loader asks the environment for its rows, every one of them
// and nothing else; every default passes its own parser.
func TestLoadersReadExactlyTheirRows(t *testing.T) {
	for _, p := range Processes {
		t.Run(string(p), func(t *testing.T) {
			asked := map[string]bool{}
			if err := load(p, func(k string) string { asked[k] = true; return "" }); err != nil {
				t.Fatalf("defaults refused: %v", err)
			}
			want := map[string]bool{}
			for _, v := range Vars(p) {
				if !v.Runtime {
					want[v.Name] = true
				}
			}
			if got, want := slices.Sorted(maps.Keys(asked)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, want) {
				t.Fatalf("read %v\nwant %v", got, want)
			}
		})
	}
}

// The services' shared rows reach each one's Common; the archiver reads
// none of Redis's.
func TestSharedRowsReachEveryReader(t *testing.T) {
	env := mapEnv(map[string]string{"KAFKA_BROKERS": "k:9092", "LOG_LEVEL": "debug", "REDIS_URL": "redis://r:6379/1",
		"DATABASE_URL": "postgres://db/x"})
	l, err := LoadLimiter(env)
	if err != nil || l.KafkaBrokers[0] != "k:9092" || l.LogLevel != "debug" || l.RedisURL != "redis://r:6379/1" || l.DatabaseURL != "postgres://db/x" {
		t.Fatalf("limiter: %+v %v", l, err)
	}
	d, err := LoadDetector(env)
	if err != nil || d.KafkaBrokers[0] != "k:9092" || d.LogLevel != "debug" || d.RedisURL != "redis://r:6379/1" {
		t.Fatalf("detector: %+v %v", d, err)
	}
	a, err := LoadArchiver(env)
	if err != nil || a.KafkaBrokers[0] != "k:9092" || a.LogLevel != "debug" || a.RedisURL != "" || a.DatabaseURL != "postgres://db/x" {
		t.Fatalf("archiver: %+v %v", a, err)
	}
	n, err := LoadNotifier(env)
	if err != nil || n.KafkaBrokers[0] != "k:9092" || n.LogLevel != "debug" || n.RedisURL != "" || n.BansTopic != "ratelimit.bans" || n.ListenAddr != ":8084" {
		t.Fatalf("notifier: %+v %v", n, err)
	}
	if a.ListenAddr != ":8082" || d.ListenAddr != ":8081" || l.ListenAddr != ":8080" {
		t.Fatalf("listen defaults %q %q %q", l.ListenAddr, d.ListenAddr, a.ListenAddr)
	}
}

func TestLookup(t *testing.T) {
	if v, ok := Lookup(DetectorProcess, "LISTEN_ADDR"); !ok || v.Default != ":8081" {
		t.Fatalf("detector's LISTEN_ADDR: %+v %v", v, ok)
	}
	if _, ok := Lookup(DetectorProcess, "ADMIN_TOKEN"); ok {
		t.Fatal("the detector reads ADMIN_TOKEN")
	}
	if _, ok := Lookup(ArchiverProcess, "REDIS_URL"); ok {
		t.Fatal("the archiver reads REDIS_URL")
	}
}

// A row bound to the field of a process that does not list it is a
// programming error, found by the first load.
func TestRowOfAnotherProcessPanics(t *testing.T) {
	v := Var{Name: "X", Readers: detectorOnly, load: bind(inLimiter(func(c *Limiter) *string { return &c.AdminToken }), text)}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "X") {
			t.Fatalf("recovered %v, want a panic naming X", r)
		}
	}()
	var c Detector
	v.load(newEnv(DetectorProcess, mapEnv(nil)), &v, &dest{common: &c.Common, detector: &c})
}
