#!/usr/bin/env bash
# The offline demo: one whole agent session with no API key. It builds the
# release binaries, clones this repository into a scratch directory, starts
# the fake model server with the scripted session of tests/demo/session.json,
# and runs `agent run` there: the agent explores the copy, asks before it runs
# a command and before it edits a file (answer with one key: y, a, n, ...),
# and finishes. The daemon it starts keeps its socket and data in the scratch
# directory and is stopped at the end; the copy is left for you to look at.
set -euo pipefail
cd "$(dirname "$0")/.."

# Only what the demo runs: every release binary is linked whole (LTO).
cargo build --release --quiet -p agentd -p agent-cli -p agent-tests --bin agentd --bin agent --bin fake-llm
demo=$(mktemp -d "${TMPDIR:-/tmp}/agentd-demo.XXXXXX")
git clone --quiet . "$demo/repo"

fake_pid=
stop() {
    if [ -f "$demo/data/agentd.lock" ]; then
        kill "$(cat "$demo/data/agentd.lock")" 2>/dev/null || true
    fi
    if [ -n "$fake_pid" ]; then kill "$fake_pid" 2>/dev/null || true; fi
}
trap stop EXIT

./target/release/fake-llm --port 0 --script tests/demo/session.json \
    --reply "The scripted session is over; this is the fake model's fixed answer." \
    >"$demo/fake-llm.out" 2>&1 &
fake_pid=$!
url=
for _ in $(seq 100); do
    url=$(sed -n 's/^fake LLM listening on //p' "$demo/fake-llm.out")
    [ -n "$url" ] && break
    sleep 0.05
done
if [ -z "$url" ]; then
    echo "demo: the fake model server did not start:" >&2
    cat "$demo/fake-llm.out" >&2
    exit 1
fi

export AGENTD_SOCKET="$demo/agentd.sock" AGENTD_DATA_DIR="$demo/data"
export ANTHROPIC_BASE_URL="$url" ANTHROPIC_API_KEY=offline
./target/release/agent run --cwd "$demo/repo" \
    "Look around this repository, check the toolchain, and add a note to its README."
echo
echo "demo: the scratch copy is $demo/repo (see: git -C $demo/repo diff); the daemon's log is $demo/agentd.log"
