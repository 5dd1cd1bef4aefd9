"""A stock Python gRPC client for agentd, as a third party would write one.

It uses only what PyPI offers (grpcio, grpcio-tools, grpcio-reflection,
pinned in requirements.txt) with default channel options on `unix:PATH`,
and generates its stubs from proto/agent/v1/agent.proto when it runs.

    python client.py SOCKET PROTO_ROOT OUT_DIR CWD [AUTHORITY]

With AUTHORITY it sends that `:authority` instead of gRPC C-core's default
(the percent-encoded socket path), to stand for clients that send something
else again (grpc-java and grpcurl send the bare path).

It lists the services by reflection, creates a conversation in CWD and lists
the conversations (unary calls), then attaches to the conversation, sends
"hello" on the stream and waits for the model's reply. Each step prints one
line (`services: ...`, `created: ID`, `listed: N`, `reply: TEXT`); a failure
prints `error: ...` and exits 1. The end-to-end suite checks those lines.
"""

import os
import queue
import sys

import grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_tools import protoc

TIMEOUT = 20.0


def generate(proto_root, out_dir):
    """Generates agent_pb2 and agent_pb2_grpc into out_dir and imports them."""
    os.makedirs(out_dir, exist_ok=True)
    # protoc needs its bundled well-known types on the include path too.
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    status = protoc.main(
        [
            "grpc_tools.protoc",
            "-I" + proto_root,
            "-I" + include,
            "--python_out=" + out_dir,
            "--grpc_python_out=" + out_dir,
            os.path.join(proto_root, "agent", "v1", "agent.proto"),
        ]
    )
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status}")
    sys.path.insert(0, out_dir)
    from agent.v1 import agent_pb2, agent_pb2_grpc

    return agent_pb2, agent_pb2_grpc


def services(channel):
    """The service names the server lists by reflection."""
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    names = []
    for response in stub.ServerReflectionInfo(iter([request]), timeout=TIMEOUT):
        if response.HasField("error_response"):
            raise RuntimeError(response.error_response.error_message)
        names.extend(s.name for s in response.list_services_response.service)
    return sorted(names)


def attach_and_chat(pb, stub, conversation_id):
    """Attaches, sends "hello" and returns the text of the model's reply."""
    outgoing = queue.Queue()

    def requests():
        while True:
            frame = outgoing.get()
            if frame is None:
                return
            yield frame

    outgoing.put(
        pb.AttachRequest(
            subscribe=pb.Subscribe(
                conversation_id=conversation_id, client_name="python-grpcio"
            )
        )
    )
    call = stub.Attach(requests(), timeout=TIMEOUT)
    streamed = []
    try:
        for event in call:
            kind = event.WhichOneof("event")
            if kind == "snapshot":
                outgoing.put(pb.AttachRequest(send=pb.SendMessageFrame(text="hello")))
            elif kind == "text_delta":
                streamed.append(event.text_delta.text)
            elif kind == "error":
                raise RuntimeError(f"error event: {event.error}")
            elif kind == "message_appended":
                message = event.message_appended.message
                if message.role == pb.ROLE_ASSISTANT:
                    text = "".join(
                        b.text.text for b in message.content if b.HasField("text")
                    )
                    if "".join(streamed) != text:
                        raise RuntimeError(
                            f"streamed {''.join(streamed)!r} but the message says {text!r}"
                        )
                    return text
        raise RuntimeError("the stream ended before the reply")
    finally:
        outgoing.put(None)
        call.cancel()


def main(argv):
    if len(argv) not in (5, 6):
        print(__doc__, file=sys.stderr)
        return 2
    socket, proto_root, out_dir, cwd = argv[1:5]
    pb, pb_grpc = generate(proto_root, out_dir)
    # Default options unless told: this is what a stock client sends.
    options = [("grpc.default_authority", argv[5])] if len(argv) == 6 else None
    with grpc.insecure_channel("unix:" + socket, options=options) as channel:
        print("services: " + " ".join(services(channel)), flush=True)
        stub = pb_grpc.AgentServiceStub(channel)
        created = stub.CreateConversation(
            pb.CreateConversationRequest(cwd=cwd), timeout=TIMEOUT
        )
        conversation_id = created.conversation.id
        print("created: " + conversation_id, flush=True)
        listed = stub.ListConversations(pb.ListConversationsRequest(), timeout=TIMEOUT)
        print(f"listed: {len(listed.conversations)}", flush=True)
        print("reply: " + attach_and_chat(pb, stub, conversation_id), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except grpc.RpcError as e:
        print(f"error: {e.code()}: {e.details()}", flush=True)
        sys.exit(1)
    except Exception as e:  # noqa: BLE001 - the suite reads the line
        print(f"error: {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
