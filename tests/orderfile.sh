#!/usr/bin/env bash
# Writes client-cli/link/startup-symbols.txt: the functions of the release
# client that `agent run` (one tool round), `agent ls` and `agent show` run,
# which the release build links first, together (client-cli/link/order.rs;
# BENCHMARKS.md, 2026-11-27, later). Rerun it after a toolchain or
# dependency update: the list names symbols with their hashes, and names the
# binary no longer has are only skipped.
#
#   tests/orderfile.sh
#
# Needs valgrind (callgrind). Uses the release binaries of the test package
# (`cargo build --release -p agent-tests --bins`, which it runs).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "orderfile.sh: needs valgrind (callgrind)" >&2; exit 1; }
cargo build --release -p agent-tests --bins
bin="${CARGO_TARGET_DIR:-target}/release"
out=client-cli/link/startup-symbols.txt

work=$(mktemp -d)
chmod 700 "$work"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

mkdir -m 700 "$work/data" "$work/home"
printf '%s\n' '[{"tool": "bash", "input": {"command": "echo round-0"}}, {"text": "All rounds ran."}]' >"$work/script.json"
printf '[limits]\nmax_iterations = 1000\n' >"$work/config.toml"
port=$((20000 + RANDOM % 20000))
"$bin/fake-llm" --port "$port" --script "$work/script.json" >"$work/fake.log" 2>&1 &
pids+=($!)
HOME="$work/home" ANTHROPIC_BASE_URL="http://127.0.0.1:$port" ANTHROPIC_API_KEY=fake \
    "$bin/test-agentd" --socket "$work/agentd.sock" --data-dir "$work/data" \
    --config "$work/config.toml" >"$work/daemon.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$work/agentd.sock" ] && break; sleep 0.1; done
[ -S "$work/agentd.sock" ] || { cat "$work/daemon.log" >&2; exit 1; }

agent() {
    (cd "$work" && valgrind --tool=callgrind --demangle=no --dump-instr=no \
        --callgrind-out-file="$work/cg.%p" "$bin/test-agent" \
        --socket "$work/agentd.sock" --no-autostart "$@" </dev/null)
}
agent run --allow bash "run echo round-K 1 times" >/dev/null 2>"$work/run.err"
id=$(sed -n 's/^.*conversation \([0-9A-Z]*\).*$/\1/p' "$work/run.err" | head -1)
[ -n "$id" ] || { cat "$work/run.err" >&2; exit 1; }
agent ls >/dev/null 2>&1
agent show "$id" >/dev/null 2>&1

# callgrind names each object (ob=) and function (fn=, cfn=) once in full,
# then by number; keep the functions that belong to the client binary.
client=$(realpath "$bin/test-agent")
awk -v client="$client" '
    function name(line,    id, rest) {
        id = line; sub(/^\(/, "", id); sub(/\).*$/, "", id)
        rest = line; sub(/^\([0-9]+\) ?/, "", rest)
        return id SUBSEP rest
    }
    /^ob=/ { split(name(substr($0, 4)), p, SUBSEP); if (p[2] != "") obs[p[1]] = p[2]; ob = obs[p[1]]; next }
    /^c?fn=/ {
        text = $0; sub(/^c?fn=/, "", text)
        split(name(text), p, SUBSEP)
        # callgrind marks recursion levels and cycles with a suffix.
        if (p[2] != "") { f = p[2]; sub(/\047[0-9]+$/, "", f); fns[p[1]] = f }
        if (substr($0, 1, 3) == "fn=" && ob == client) print fns[p[1]]
    }
' "$work"/cg.* | LC_ALL=C sort -u >"$work/symbols"
# The client's own text symbols only (no PLT stubs or addresses).
grep -E '^(_ZN|_R|[A-Za-z_][A-Za-z0-9_]*$)' "$work/symbols" >"$out"
echo "orderfile.sh: $(wc -l <"$out") functions written to $out"
