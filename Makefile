# ratewarden: the two set-up commands are `make run` and `make test`.
GO       ?= go
BIN      := bin
FUZZTIME ?= 5000x

.PHONY: all help build run demo test vet lint unit allocs fuzz-short fuzz bench clean

all: build

## Targets (make TARGET):
## help        this list
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)

## build       the binaries in bin/ (limiter, detector, archiver, notifier, console, devkafka; loadgen, loginsim, bansummary for the demo)
build:
	$(GO) build -o $(BIN)/ ./cmd/...

## run         the local stack in the foreground (devkafka when no broker answers, archiver, the notifier when
##             NOTIFY_RECEIVERS_FILE is set, detector, limiter, console; Redis, Postgres if need be); prints the
##             tokens' files, the console's address and login, and curl lines to try; Ctrl-C stops it
run: build
	deploy/local/run.sh

## demo        the stack under synthetic traffic (normal users, a brute forcer, a scanner, login attackers): who
##             got banned and why, the attackers refused after their ban, the analysts' views, in a database of
##             its own (ratewarden_demo); stops by itself; needs kcat and psql (apt-get install kcat postgresql-client)
demo: build
	deploy/local/demo.sh

## test        vet, lint, fuzz-short, unit and allocs: every test (integration tests use the local Redis and
##             Postgres and an embedded broker); what .ci/run calls
test: vet lint fuzz-short unit allocs

# The Go client (client/) is a module of its own, which ./... leaves out:
# every target runs on it too.
## vet         go vet ./..., in the module and the client's
vet:
	$(GO) vet ./...
	cd client && $(GO) vet ./...

## lint        staticcheck, its default checks (the version is go.mod's tool line); any finding fails
lint:
	$(GO) tool staticcheck ./...
	cd client && $$($(GO) -C .. tool -n staticcheck) ./...

# The packages but the end-to-end tests run with the race detector, one at
# a time: several start their own Redis servers, clusters and processes,
# and a few hold the production REDIS_TIMEOUT (50 ms); run side by side on a
# 2-core machine they starve each other. Their test binaries are built first,
# two at a time, since building one at a time left a core idle (-p 1 limits
# builds too). The end-to-end tests run the built binaries, which are not
# race-built; under the race detector only the embedded broker in their own
# process would be checked, at half the speed. go vet has run on every
# package (make vet), so the tests do not run its subset again (-vet=off).
# The few end-to-end tests that mostly wait (on consumer groups, restarts,
# lapsing bans) and assert no timing are parallel, all four at once
# (-parallel 4), after the others, with a timeout past go test's 10 minutes:
# they take 5 to 6 on an idle 2-core machine and more on a busy one.
## unit        every test with the race detector, the client's too, then the end-to-end tests (internal/e2e) without it
UNIT_PKGS = $(shell $(GO) list ./... | grep -v '/internal/e2e$$')
unit:
	$(GO) test -race -vet=off -count=1 -run '^$$' $(UNIT_PKGS) >/dev/null
	$(GO) test -race -vet=off -count=1 -p 1 $(UNIT_PKGS)
	cd client && $(GO) test -race -vet=off -count=1 ./...
	$(GO) test -vet=off -count=1 -parallel 4 -timeout 30m ./internal/e2e/

# The tests that pin allocations per decision, without the race detector,
# under which sync.Pool drops objects at random (they skip themselves there).
## allocs      the tests that pin allocations per decision, without the race detector
allocs:
	$(GO) test -vet=off -count=1 -run 'Allocations$$' ./internal/httpapi/ ./internal/redisstore/ ./internal/rlsapi/
	cd client && $(GO) test -vet=off -count=1 -run 'Allocations$$' .

## fuzz-short  each fuzz target briefly (FUZZTIME runs, default 5000x)
fuzz-short:
	deploy/local/fuzz.sh $(FUZZTIME)

## fuzz        each fuzz target for longer (default 1m: FUZZTIME=10m make fuzz)
fuzz:
	deploy/local/fuzz.sh $(if $(filter 5000x,$(FUZZTIME)),1m,$(FUZZTIME))

## bench       the benchmark suite (per algorithm: redis-benchmark ceiling, HTTP, gRPC and in-process
##             throughput, CPU per decision, latency at half load, memory; detector, archiver, rule
##             propagation); gRPC also by an independent client, ghz (GHZ_BIN, else go install into
##             .local/bin; GHZ=0 skips it; needs jq); writes docs/benchmark.md
bench: build
	deploy/local/bench.sh

## clean       remove bin/ (.local/run/, with make run's tokens and private databases, stays)
clean:
	rm -rf $(BIN)

## 
## Variables people set (VAR=value make TARGET; defaults in brackets):
##   REDIS_URL      Redis of run, demo [redis://127.0.0.1:6379/0]
##   DATABASE_URL   Postgres of run, demo [postgres://postgres@127.0.0.1:5432/ratewarden?sslmode=disable]
##   KAFKA_BROKERS  broker of run, demo; devkafka starts there when none answers [127.0.0.1:9092]
##   API_TOKENS     the limiter's API tokens [the one in .local/run/api-token, made on the first run]
##   ADMIN_TOKEN    the limiter's admin token [the one in .local/run/admin-token, made on the first run]
##   LIMITER_ADDR   the limiter's HTTP address in run, demo [127.0.0.1:8080]; also DETECTOR_ADDR [:8081],
##                  ARCHIVER_ADDR [:8082], GRPC_LISTEN_ADDR [:8083], CONSOLE_ADDR [:8085] (run), all on 127.0.0.1
##   DURATION, RATE demo's traffic [30s, 300 requests/s]
##   FUZZTIME       fuzz-short's and fuzz's time per target [5000x, 1m]
##   GO             the go command [go]
## Every other setting of the services: docs/configuration.md
