# A felix broker image: the static binary on a minimal base, run as a
# non-root user, its data directory a volume.
#
#   docker build -t felix .
#   docker run -p 5000:5000/udp -p 127.0.0.1:5080:5080 -v felix-data:/var/lib/felix felix
#
# The broker listens on 0.0.0.0 inside the container (FELIX_LISTEN,
# FELIX_ADMIN below), so it needs --auth jwt, the default: its first start
# writes admin.token into the volume. /metrics is open to whoever reaches
# the admin port, hence 127.0.0.1 above. The generated certificate names
# localhost only: clients reaching the broker by another name need a
# certificate for it, mounted and passed as FELIX_TLS_CERT and
# FELIX_TLS_KEY.

# A pinned Go release (go.mod needs 1.26 or later). Distroless's static
# image has no version tags: pin it by digest where a registry is at hand.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO off: a static binary that needs no libc in the final image. The
# build stamps vcs.revision and vcs.time when .git is in the context,
# which felix version prints.
RUN CGO_ENABLED=0 go build -trimpath -o /out/felix ./cmd/felix && mkdir /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/felix /usr/local/bin/felix
# distroless's nonroot user (uid 65532) owns the data directory.
COPY --from=build --chown=65532:65532 /out/data /var/lib/felix
USER 65532:65532
ENV FELIX_LISTEN=0.0.0.0:5000 \
    FELIX_ADMIN=0.0.0.0:5080 \
    FELIX_DATA_DIR=/var/lib/felix
VOLUME /var/lib/felix
# felix/1 is QUIC, so UDP; the admin endpoint (/metrics, /live, /ready) TCP.
EXPOSE 5000/udp 5080/tcp
ENTRYPOINT ["/usr/local/bin/felix"]
CMD ["broker"]
