# syntax=docker/dockerfile:1
#
# One image for the four services (and the load generator):
#   limiter   the default ENTRYPOINT, listens on :8080
#   detector  entrypoint /usr/local/bin/detector, listens on :8081
#   archiver  entrypoint /usr/local/bin/archiver, listens on :8082
#   notifier  entrypoint /usr/local/bin/notifier, listens on :8084
#   console   entrypoint /usr/local/bin/console, listens on :8085
#   loadgen   entrypoint /usr/local/bin/loadgen (flags only)
# The binaries take no arguments: configuration comes from the environment
# (docs/configuration.md), so docker compose overrides `entrypoint` and
# Kubernetes `command` to pick the service.
#
#   docker build -t ratewarden:local .

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Dependencies first: this layer is rebuilt only when go.mod or go.sum change
# (the client's too: a module of its own, which go.mod replaces with ./client).
COPY go.mod go.sum ./
COPY client/go.mod client/go.sum ./client/
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
# Static binaries (no cgo): they run on distroless/static. -trimpath and
# -s -w make them reproducible and smaller.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/ \
        ./cmd/limiter ./cmd/detector ./cmd/archiver ./cmd/notifier ./cmd/console ./cmd/loadgen

# distroless/static: CA certificates, tzdata (rules' `schedule.daily.tz`),
# /etc/passwd with the nonroot user (65532); no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/limiter /out/detector /out/archiver /out/notifier /out/console /out/loadgen /usr/local/bin/
# The example rules, so the image starts as is; deployments mount their own
# rules over this path (compose: a bind mount, Kubernetes: a ConfigMap).
COPY deploy/rules.example.yaml /etc/ratewarden/rules.yaml
ENV RULES_FILE=/etc/ratewarden/rules.yaml
USER 65532:65532
# limiter; the detector serves :8081, the archiver :8082, the notifier :8084
# and the console :8085 (metrics, probes; the console its pages too).
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/limiter"]
