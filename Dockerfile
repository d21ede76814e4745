# syntax=docker/dockerfile:1
# Multi-stage build: static binaries on a distroless base, run as non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/reprise ./cmd/reprise \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/mockllm ./cmd/mockllm

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/reprise /out/mockllm /usr/local/bin/
USER nonroot:nonroot
WORKDIR /home/nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/reprise"]
