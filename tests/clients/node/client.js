// A stock Node gRPC client for agentd, as a third party would write one.
//
// It uses only what the npm registry offers (@grpc/grpc-js, @grpc/proto-loader
// and grpc-js-reflection-client, pinned in package.json and package-lock.json)
// with default channel options on `unix:PATH`, and loads
// proto/agent/v1/agent.proto when it runs.
//
//     node client.js SOCKET PROTO_ROOT CWD
//
// It lists the services and the agent service's methods by reflection,
// creates a conversation in CWD and lists the conversations (unary calls),
// then attaches to the conversation, sends "hello" on the stream and waits
// for the model's reply. Each step prints one line (`services: ...`,
// `methods: ...`, `created: ID`, `listed: N`, `reply: TEXT`); a failure
// prints `error: ...` and exits 1. The end-to-end suite checks those lines.
'use strict';

const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { GrpcReflection } = require('grpc-js-reflection-client');

const TIMEOUT_MS = 20000;

function deadline() {
  return { deadline: new Date(Date.now() + TIMEOUT_MS) };
}

function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, deadline(), (err, response) => (err ? reject(err) : resolve(response)));
  });
}

// Attaches, sends "hello" and resolves to the text of the model's reply.
function attachAndChat(client, conversationId) {
  return new Promise((resolve, reject) => {
    const call = client.Attach(deadline());
    const streamed = [];
    let done = false;
    const finish = (err, text) => {
      if (done) return;
      done = true;
      call.cancel();
      if (err) reject(err);
      else resolve(text);
    };
    call.on('data', (event) => {
      switch (event.event) {
        case 'snapshot':
          call.write({ send: { text: 'hello' } });
          break;
        case 'textDelta':
          streamed.push(event.textDelta.text);
          break;
        case 'error':
          finish(new Error(`error event: ${JSON.stringify(event.error)}`));
          break;
        case 'messageAppended': {
          const message = event.messageAppended.message;
          if (message.role !== 'ROLE_ASSISTANT') break;
          const text = message.content
            .filter((b) => b.block === 'text')
            .map((b) => b.text.text)
            .join('');
          if (streamed.join('') !== text) {
            finish(new Error(`streamed ${JSON.stringify(streamed.join(''))} but the message says ${JSON.stringify(text)}`));
          } else {
            finish(null, text);
          }
          break;
        }
        default:
          break;
      }
    });
    call.on('error', (err) => finish(err));
    call.on('end', () => finish(new Error('the stream ended before the reply')));
    call.write({ subscribe: { conversationId, clientName: 'node-grpc-js' } });
  });
}

async function main(argv) {
  if (argv.length !== 3) {
    console.error('usage: node client.js SOCKET PROTO_ROOT CWD');
    return 2;
  }
  const [socket, protoRoot, cwd] = argv;
  const target = `unix:${socket}`;
  const credentials = grpc.credentials.createInsecure();

  const reflection = new GrpcReflection(target, credentials);
  const services = await reflection.listServices('*', deadline());
  console.log(`services: ${[...services].sort().join(' ')}`);
  const methods = await reflection.listMethods('agent.v1.AgentService', deadline());
  console.log(`methods: ${methods.map((m) => m.name).sort().join(' ')}`);

  const definition = protoLoader.loadSync(path.join('agent', 'v1', 'agent.proto'), {
    includeDirs: [protoRoot],
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const agent = grpc.loadPackageDefinition(definition).agent.v1;
  // Default options on purpose: this is what a stock client sends.
  const client = new agent.AgentService(target, credentials);
  try {
    const created = await unary(client, 'CreateConversation', { cwd });
    const id = created.conversation.id;
    console.log(`created: ${id}`);
    const listed = await unary(client, 'ListConversations', {});
    console.log(`listed: ${listed.conversations.length}`);
    console.log(`reply: ${await attachAndChat(client, id)}`);
  } finally {
    client.close();
  }
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.log(`error: ${err && err.message ? err.message : err}`);
    process.exit(1);
  },
);
