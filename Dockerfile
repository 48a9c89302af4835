# dedupd container image. Build:  docker build -t dedupd:0.1.0 .
# Run:    docker run -p 7400:7400 -v dedupd-data:/var/lib/dedupd dedupd:0.1.0
# Both stages install from Debian 12 with the project's own install script.

FROM debian:12 AS build
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN bash deploy/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEDUP_BUILD_TESTS=OFF \
 && cmake --build /build --target dedupd \
 && strip --strip-debug /build/server/dedupd

FROM debian:12
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/dedupd --shell /usr/sbin/nologin dedupd \
 && mkdir -p /var/lib/dedupd /etc/dedupd && chown dedupd:dedupd /var/lib/dedupd
COPY --from=build /build/server/dedupd /usr/local/bin/dedupd
COPY deploy/dedupd.textproto /etc/dedupd/dedupd.textproto
USER 10001:10001
VOLUME /var/lib/dedupd
# gRPC: dedup.v1.Dedup, grpc.health.v1.Health and server reflection.
EXPOSE 7400
ENTRYPOINT ["/usr/local/bin/dedupd", "--config=/etc/dedupd/dedupd.textproto", \
            "--listen=0.0.0.0:7400", "--data_dir=/var/lib/dedupd"]
