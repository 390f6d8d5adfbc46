# The gpuclaim image: `gpuclaim controller` (the live controller and webhook server), built in one stage and run
# from a distroless base that holds only glibc, CA certificates and a non-root user.
FROM docker.io/library/rust:1.89-bookworm AS build
WORKDIR /src
# Manifests first, so the dependency layer is rebuilt only when they change.
COPY Cargo.toml Cargo.lock rustfmt.toml ./
COPY engine engine
COPY sim sim
COPY scenarios scenarios
COPY adapter adapter
COPY reports reports
COPY src src
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile live --locked --bin gpuclaim \
    && cp target/live/gpuclaim /gpuclaim

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /gpuclaim /usr/local/bin/gpuclaim
USER 65532:65532
EXPOSE 9443 8443 8081
ENTRYPOINT ["/usr/local/bin/gpuclaim"]
CMD ["controller"]
