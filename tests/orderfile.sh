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
# A symbol's hash depends on the features cargo unifies for the packages
# built together, so the client is built, profiled and listed the three
# ways it is built: `cargo install --path client-cli` (as `-p agent-cli`),
# README's `-p agentd -p agent-cli`, and the test package's `test-agent`
# (the bench's client). Needs valgrind (callgrind).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "orderfile.sh: needs valgrind (callgrind)" >&2; exit 1; }
bin="${CARGO_TARGET_DIR:-target}/release"
out=client-cli/link/startup-symbols.txt

work=$(mktemp -d)
chmod 700 "$work"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

mkdir -m 700 "$work/data" "$work/home" "$work/clients"
# Each build's client, copied before the next build replaces it.
cargo build --release -p agent-cli
cp "$bin/agent" "$work/clients/install"
cargo build --release -p agentd -p agent-cli
cp "$bin/agent" "$work/clients/readme"
cargo build --release -p agent-tests --bins
cp "$bin/test-agent" "$work/clients/test-agent"

round='{"tool": "bash", "input": {"command": "echo round-0"}}, {"text": "All rounds ran."}'
echo "[$round, $round, $round]" >"$work/script.json"
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

# callgrind names each object (ob=) and function (fn=, cfn=) once in full,
# then by number; keep the functions that belong to the client binary.
client_functions() {
    awk -v client="$1" '
        function name(line,    id, rest) {
            id = line; sub(/^\(/, "", id); sub(/\).*$/, "", id)
            rest = line; sub(/^\([0-9]+\) ?/, "", rest)
            return id SUBSEP rest
        }
        # An object is named in full where it first appears, as ob= or as
        # a callee (cob=); only ob= says whose functions follow.
        /^c?ob=/ {
            text = $0; sub(/^c?ob=/, "", text)
            split(name(text), p, SUBSEP)
            if (p[2] != "") obs[p[1]] = p[2]
            if (substr($0, 1, 3) == "ob=") ob = obs[p[1]]
            next
        }
        /^c?fn=/ {
            text = $0; sub(/^c?fn=/, "", text)
            split(name(text), p, SUBSEP)
            # callgrind marks recursion levels and cycles with a suffix.
            if (p[2] != "") { f = p[2]; sub(/\047[0-9]+$/, "", f); fns[p[1]] = f }
            if (substr($0, 1, 3) == "fn=" && ob == client) print fns[p[1]]
        }
    ' "${@:2}"
}

for client in "$work"/clients/*; do
    name=$(basename "$client")
    agent() {
        (cd "$work" && valgrind --tool=callgrind --demangle=no --dump-instr=no \
            --callgrind-out-file="$work/cg.$name.%p" "$client" \
            --socket "$work/agentd.sock" --no-autostart "$@" </dev/null)
    }
    agent run --allow bash "run echo round-K 1 times" >/dev/null 2>"$work/run.err"
    id=$(sed -n 's/^.*conversation \([0-9A-Z]*\).*$/\1/p' "$work/run.err" | head -1)
    [ -n "$id" ] || { cat "$work/run.err" >&2; exit 1; }
    agent ls >/dev/null 2>&1
    agent show "$id" >/dev/null 2>&1
    client_functions "$(realpath "$client")" "$work/cg.$name".* >>"$work/symbols"
    echo "orderfile.sh: $name: $(LC_ALL=C sort -u "$work/symbols" | wc -l) functions so far"
done
# The client's own text symbols only (no PLT stubs or addresses).
LC_ALL=C sort -u "$work/symbols" | grep -E '^(_ZN|_R|[A-Za-z_][A-Za-z0-9_]*$)' >"$out"
echo "orderfile.sh: $(wc -l <"$out") functions written to $out"
