# dedupd container image. Build:  docker build -t dedupd:0.1.0 .
# Run:    docker run -p 7400:7400 -p 7401:7401 -v dedupd-data:/var/lib/dedupd dedupd:0.1.0
# The entrypoint (deploy/docker-entrypoint.sh) adds the flags below and, in a
# cluster, --node_index from the pod name; arguments go on to dedupd:
#   docker run dedupd:0.1.0 --durability=buffered
# Kubernetes: deploy/helm/dedupd/README.md. Without a Docker engine,
# deploy/build-image.sh builds this file with podman (and makes the debian:12
# base with debootstrap when no registry can be reached).
# Every stage installs from Debian 12 with the project's own install script.
#
# Stages, in the order a builder that does not skip unused stages needs:
#   runtime   the Debian runtime libraries, the dedupd user, config and entrypoint
#   prebuilt  runtime + binaries already built on a Debian 12 host, taken from
#             deploy/prebuilt/ in the build context (`--target prebuilt`; what
#             deploy/build-image.sh --prebuilt does, so nothing compiles twice)
#   build     compiles dedupd and dedupctl from the sources
#   (last)    runtime + the binaries of the build stage: the default image

FROM debian:12 AS runtime
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/dedupd --shell /usr/sbin/nologin dedupd \
 && mkdir -p /var/lib/dedupd /etc/dedupd && chown dedupd:dedupd /var/lib/dedupd
COPY deploy/dedupd.textproto /etc/dedupd/dedupd.textproto
COPY deploy/docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 0755 /usr/local/bin/docker-entrypoint.sh
USER 10001:10001
VOLUME /var/lib/dedupd
# gRPC: dedup.v1.Dedup, grpc.health.v1.Health and server reflection.
EXPOSE 7400
# HTTP: /metrics (Prometheus), /healthz and /readyz.
EXPOSE 7401
# HTTP: /healthz and /readyz only, on threads of their own.
EXPOSE 7402
# Defaults: --config=/etc/dedupd/dedupd.textproto --listen=0.0.0.0:7400
# --metrics_listen=0.0.0.0:7401 --probe_listen=0.0.0.0:7402 --data_dir=/var/lib/dedupd
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]

FROM runtime AS prebuilt
COPY deploy/prebuilt/ /usr/local/bin/

FROM debian:12 AS build
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN bash deploy/install-deps.sh --build && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEDUP_BUILD_TESTS=OFF \
 && cmake --build /build --target dedupd dedupctl \
 && strip --strip-debug /build/server/dedupd /build/client/dedupctl

FROM runtime
COPY --from=build /build/server/dedupd /build/client/dedupctl /usr/local/bin/
