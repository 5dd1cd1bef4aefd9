#!/usr/bin/env bash
# Runs the fuzz targets (agent_tests::fuzz) for a time budget each, on the
# release build: the SSE decoder and stream parsers, the permission rule and
# shell parsers, raw gRPC frames on a daemon's socket, and random RPC
# sequences from several clients.
#
#   tests/fuzz.sh [TARGET|all] [SECONDS]     # default: all, 600 s per target
#   FUZZ_SEED=123 tests/fuzz.sh rules 60      # repeat a run's seed
#
# Targets: sse, rules, grpc-frames, rpc-sequences. Each prints its seed
# first, then the cases it ran and every failure with its (minimized) input.
# Exits non-zero if any target found a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${1:-all}
seconds=${2:-600}
case "$target" in
    all | sse | rules | grpc-frames | rpc-sequences) ;;
    *)
        echo "usage: tests/fuzz.sh [all|sse|rules|grpc-frames|rpc-sequences] [SECONDS]" >&2
        exit 2
        ;;
esac

echo "== building the release binaries (agent-fuzz, test-agentd)"
cargo build --release --locked -p agent-tests --bins

seed_args=()
if [ -n "${FUZZ_SEED:-}" ]; then
    seed_args=(--seed "$FUZZ_SEED")
fi
# The daemon targets start target/release/test-agentd (found next to
# agent-fuzz), unless AGENT_TESTS_DAEMON_BIN names another.
exec target/release/agent-fuzz "$target" --seconds "$seconds" "${seed_args[@]}"
