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

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "nproc: $(nproc)"
echo "memory: $(free -h | awk '/^Mem:/ {print $2}')"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "uptime: $(uptime)"
echo "command: cargo run --release -p agent-tests --bin agent-bench -- $scenario $*"
echo

exec cargo run --release -q -p agent-tests --bin agent-bench -- "$scenario" "$@"
