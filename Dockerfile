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
# The release stamp (docs/release.md): --build-arg VERSION=v1.2.0 (the tag)
# and REVISION=<commit>, into the binary (reprise --version, the start log
# line) and the image's OCI labels. The build context has no .git
# (.dockerignore), so Go records no VCS data here: without VERSION the
# binary says "(devel)" and the revision "unknown".
ARG VERSION=""
ARG REVISION=""
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags="-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" -o /out/ \
      ./cmd/reprise ./cmd/mockllm ./deploy/healthcheck

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=""
ARG REVISION=""
LABEL org.opencontainers.image.title="reprise" \
      org.opencontainers.image.description="A proxy that makes streamed LLM responses durable and resumable" \
      org.opencontainers.image.source="https://github.com/reprise-dev/reprise" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
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
