# dedupd container image. Build:  docker build -t dedupd:0.1.0 .
# Run:    docker run -p 7400:7400 -p 7401:7401 -v dedupd-data:/var/lib/dedupd dedupd:0.1.0
# The entrypoint (deploy/docker-entrypoint.sh) adds the flags below and, in a
# cluster, --node_index from the pod name; arguments go on to dedupd:
#   docker run dedupd:0.1.0 --durability=buffered
# Kubernetes: deploy/helm/dedupd/README.md.
# Both stages install from Debian 12 with the project's own install script.

FROM debian:12 AS build
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN bash deploy/install-deps.sh --build && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEDUP_BUILD_TESTS=OFF \
 && cmake --build /build --target dedupd dedupctl \
 && strip --strip-debug /build/server/dedupd /build/client/dedupctl

FROM debian:12
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/dedupd --shell /usr/sbin/nologin dedupd \
 && mkdir -p /var/lib/dedupd /etc/dedupd && chown dedupd:dedupd /var/lib/dedupd
COPY --from=build /build/server/dedupd /usr/local/bin/dedupd
COPY --from=build /build/client/dedupctl /usr/local/bin/dedupctl
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
