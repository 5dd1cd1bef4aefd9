# The minimal agent loop in Python (issue 44's table: "vs a minimal Python
# loop"), run by `agent-bench floor` as `python3 -c <this> ADDR PROMPT`.
# The same task as the Rust floor: one keep-alive HTTP/1.1 connection to the
# fake, the SSE reply folded into blocks, `bash -c` for each tool call, the
# results appended as a user message, nothing persisted. Prints the number
# of tool rounds and this process's CPU time in ns (its bash children's
# left out, as for the Rust floor).
import http.client, json, subprocess, sys, time

addr, prompt = sys.argv[1], sys.argv[2]
host, port = addr.rsplit(":", 1)
conn = http.client.HTTPConnection(host, int(port))
tools = [{"name": "bash", "description": "Run a shell command",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                           "required": ["command"]}}]
messages = [{"role": "user", "content": prompt}]
headers = {"content-type": "application/json", "x-api-key": "test-key",
           "anthropic-version": "2023-06-01"}
rounds = 0
while True:
    body = json.dumps({"model": "claude-test", "max_tokens": 1024, "stream": True,
                       "tools": tools, "messages": messages})
    conn.request("POST", "/v1/messages", body, headers)
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit(f"the fake answered {resp.status}")
    blocks, parts = [], []
    for line in resp.read().decode().splitlines():
        if not line.startswith("data:"):
            continue
        event = json.loads(line[5:])
        index = event.get("index", 0)
        kind = event.get("type")
        if kind == "content_block_start":
            while len(blocks) <= index:
                blocks.append(None)
                parts.append("")
            blocks[index] = event["content_block"]
        elif kind == "content_block_delta":
            delta = event["delta"]
            if delta.get("type") == "text_delta":
                blocks[index]["text"] = blocks[index].get("text", "") + delta["text"]
            elif delta.get("type") == "input_json_delta":
                parts[index] += delta["partial_json"]
        elif kind == "error":
            sys.exit(f"the fake sent an error: {event}")
    for block, part in zip(blocks, parts):
        if block["type"] == "tool_use" and part:
            block["input"] = json.loads(part)
    messages.append({"role": "assistant", "content": blocks})
    calls = [b for b in blocks if b["type"] == "tool_use"]
    if not calls:
        break
    results = []
    for call in calls:
        out = subprocess.run(["bash", "-c", call["input"]["command"]],
                             stdin=subprocess.DEVNULL, capture_output=True)
        results.append({"type": "tool_result", "tool_use_id": call["id"],
                        "content": (out.stdout + out.stderr).decode(errors="replace"),
                        "is_error": out.returncode != 0})
    messages.append({"role": "user", "content": results})
    rounds += 1
print(rounds, time.process_time_ns())
