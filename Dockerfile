# sqlgroup on Debian 12, built from the same Debian packages as
# scripts/setup.sh. Build stage compiles; the runtime stage carries only the
# binary and its shared libraries.
FROM debian:12 AS build
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      g++ cmake make pkg-config \
      libpqxx-dev libpq-dev libabsl-dev prometheus-cpp-dev libspdlog-dev libfmt-dev \
      libcurl4-openssl-dev libssl-dev nlohmann-json3-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY include include
COPY src src
COPY sql sql
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSQLGROUP_BUILD_TESTS=OFF -DSQLGROUP_BUILD_BENCH=OFF \
 && cmake --build /build -j"$(nproc)" \
 && cmake --install /build --prefix /opt/sqlgroup

FROM debian:12-slim AS runtime-base
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libpqxx-6.4 libpq5 libabsl20220623 libprometheus-cpp-core1.0 \
      libcivetweb1 libspdlog1.10 libfmt9 libcurl4 libssl3 \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --no-create-home sqlgroup
COPY --from=build /opt/sqlgroup/bin/sqlgroup /usr/local/bin/sqlgroup
USER sqlgroup
# Metrics, when run with --metrics_addr 0.0.0.0:9464.
EXPOSE 9464
ENTRYPOINT ["sqlgroup"]
CMD ["--help"]

# The same with python3, for exec handlers written in Python
# (docker-compose.yml's receipts-consumer: examples/handlers/worker.py).
FROM runtime-base AS with-python
USER root
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 \
 && rm -rf /var/lib/apt/lists/*
USER sqlgroup

# The default image (`docker build .` builds the last stage): without python.
FROM runtime-base AS runtime
