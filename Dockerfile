# syntax=docker/dockerfile:1
# Multi-stage build of the one spillway binary (picker, gateway, sidecar).
#   docker build -t $SPILLWAY_IMAGE .
# The binary is static (CGO_ENABLED=0: the ZMQ client is pure Go), so the
# runtime image is distroless and runs as a non-root user.
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -buildvcs=false -ldflags="-s -w" -o /out/spillway ./cmd/spillway

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/spillway /usr/local/bin/spillway
USER 65532:65532
EXPOSE 9002 9003 9090 8000
ENTRYPOINT ["/usr/local/bin/spillway"]
