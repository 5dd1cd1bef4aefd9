#!/usr/bin/env bash
# Runs the agentd benchmarks (issue 7) in release mode.
#
#   tests/bench.sh [SCENARIO|all] [agent-bench options...]
#
# Builds the release daemon, client and bench binaries, installs ripgrep
# (for the search comparison) if it is missing, records the machine and its
# load, then runs `agent-bench`. Numbers are written to stdout; redirect
# them to a file to keep them.
set -euo pipefail
cd "$(dirname "$0")/.."

scenario="${1:-all}"
shift || true

if ! command -v rg >/dev/null 2>&1; then
    echo "bench.sh: installing ripgrep (cargo install ripgrep)" >&2
    cargo install ripgrep
fi

cargo build --release -p agent-tests --bins
# The binary itself, not `cargo run`: cargo puts five of its build
# directories on LD_LIBRARY_PATH, and every process the bench starts (the
# client, the floor, each `bash`) would search them for every library it
# loads: 0.25-0.3 ms more per process start (BENCHMARKS.md, 2026-11-27).
bench="${CARGO_TARGET_DIR:-target}/release/agent-bench"

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "nproc: $(nproc)"
echo "memory: $(free -h | awk '/^Mem:/ {print $2}')"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "uptime: $(uptime)"
echo "command: $bench $scenario $*"
echo

exec "$bench" "$scenario" "$@"
