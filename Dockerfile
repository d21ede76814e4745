# syntax=docker/dockerfile:1
# Multi-stage build: static binaries (reprise, the fake upstream mockllm and
# the container health probe) on a distroless base, run as a non-root user.
FROM golang:1.26 AS build
WORKDIR /src
# The binaries are the root module's alone: go.work would bring in the tests'
# module (tests/go.mod) and its test-only dependencies.
ENV CGO_ENABLED=0 GOWORK=off
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ \
      ./cmd/reprise ./cmd/mockllm ./deploy/healthcheck

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/reprise /out/mockllm /out/healthcheck /usr/local/bin/
# distroless "nonroot": uid/gid 65532, numeric so runAsNonRoot checks pass.
USER 65532:65532
WORKDIR /home/nonroot
EXPOSE 8080
# Goroutines start with the smallest stack, not the running average: an idle
# reader's parked goroutines then hold ~6 KB of stack, not ~8 (docs/scaling.md,
# Memory). Runtime settings have no //go:debug form; the environment sets it.
ENV GODEBUG=adaptivestackstart=0
ENTRYPOINT ["/usr/local/bin/reprise"]
