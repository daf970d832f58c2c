# syntax=docker/dockerfile:1
# Multi-stage build: compile in the Rust image, run from a small Debian slim image as a non-root user.
# Configuration comes only from the environment (see README, "Configuration").

FROM rust:1-bookworm AS build
WORKDIR /src
# Dependencies first, so they are cached across source changes.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src && echo 'fn main() {}' > src/main.rs && echo '' > src/lib.rs \
    && cargo build --release --locked || true
COPY src ./src
RUN touch src/main.rs src/lib.rs && cargo build --release --locked \
    && strip target/release/privacy-ledger

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/privacy-ledger --create-home ledger
COPY --from=build /src/target/release/privacy-ledger /usr/local/bin/privacy-ledger
USER 10001
WORKDIR /var/lib/privacy-ledger
ENV PRIVACY_LEDGER_LISTEN=0.0.0.0:8080 \
    DATABASE_URL=sqlite:///var/lib/privacy-ledger/privacy-ledger.db \
    PRIVACY_LEDGER_LOG_FORMAT=json \
    RUST_LOG=info
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/readyz || exit 1
ENTRYPOINT ["privacy-ledger"]
CMD ["serve"]
