# ratewarden: the two set-up commands are `make run` and `make test`.
GO       ?= go
BIN      := bin
FUZZTIME ?= 5000x

.PHONY: all help build run demo test vet lint unit allocs fuzz-short fuzz bench clean

all: build

## help: this list of targets
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)

build:
	$(GO) build -o $(BIN)/ ./cmd/...

## run: the local stack in the foreground (devkafka when no broker answers, archiver, detector, limiter); Ctrl-C stops it
run: build
	deploy/local/run.sh

## demo: the stack under synthetic traffic (normal users, a brute forcer, a scanner): live summary, bans as they
##       arrive on the ban topic, the analysts' views; stops by itself
demo: build
	deploy/local/demo.sh

## test: vet, staticcheck, every test (integration tests use the local Redis and an embedded broker), each fuzz
##       target briefly
test: vet lint fuzz-short unit allocs

vet:
	$(GO) vet ./...

## lint: staticcheck, its default checks (the version is go.mod's tool line); any finding fails
lint:
	$(GO) tool staticcheck ./...

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
# (-parallel 4), after the others.
UNIT_PKGS = $(shell $(GO) list ./... | grep -v '/internal/e2e$$')
unit:
	$(GO) test -race -vet=off -count=1 -run '^$$' $(UNIT_PKGS) >/dev/null
	$(GO) test -race -vet=off -count=1 -p 1 $(UNIT_PKGS)
	$(GO) test -vet=off -count=1 -parallel 4 ./internal/e2e/

# The tests that pin allocations per decision, without the race detector,
# under which sync.Pool drops objects at random (they skip themselves there).
allocs:
	$(GO) test -vet=off -count=1 -run 'Allocations$$' ./internal/httpapi/ ./internal/redisstore/ ./internal/rlsapi/

fuzz-short:
	deploy/local/fuzz.sh $(FUZZTIME)

## fuzz: each fuzz target for longer (FUZZTIME=1m make fuzz)
fuzz:
	deploy/local/fuzz.sh $(if $(filter 5000x,$(FUZZTIME)),1m,$(FUZZTIME))

## bench: the benchmark suite (per algorithm: redis-benchmark ceiling, HTTP, gRPC and in-process throughput, CPU per
##        decision, latency at half load, memory; detector, archiver, rule propagation); writes docs/benchmark.md
bench: build
	deploy/local/bench.sh

clean:
	rm -rf $(BIN)
