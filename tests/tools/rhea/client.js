// A non-Python AMQP 1.0 client (Node's rhea) against a served store: it sends one message to
// the anycast address "orders" (capability queue), subscribes to the multicast address "news"
// (capability topic), prints "attached" once the subscription is open, then prints the body of
// the first message it gets there as a JSON line and accepts it; it closes once it has that
// message and the outcome of its own send.
// usage: node client.js PORT
const container = require('rhea');
const port = parseInt(process.argv[2], 10);
const conn = container.connect({ host: '127.0.0.1', port: port, reconnect: false });
let sent = false;
const done = { got: false, settled: false };  // closes once it has both
function maybeClose() { if (done.got && done.settled) conn.close(); }
const sender = conn.open_sender({ target: { address: 'orders', capabilities: ['queue'] } });
sender.on('sendable', () => {
  if (!sent) {
    sent = true;
    sender.send({ body: 'from rhea', application_properties: { lang: 'js', n: 7 }, durable: true });
  }
});
sender.on('accepted', () => {
  console.log(JSON.stringify({ sent: 'accepted' }));
  done.settled = true;
  maybeClose();
});
sender.on('rejected', (ctx) => {
  const error = ctx.delivery.remote_state && ctx.delivery.remote_state.error;
  console.log(JSON.stringify({ sent: 'rejected', error: String(error && error.description) }));
  done.settled = true;
  maybeClose();
});
const receiver = conn.open_receiver({ source: { address: 'news', capabilities: ['topic'] } });
receiver.on('receiver_open', () => console.log(JSON.stringify({ attached: true })));
receiver.on('message', (ctx) => {
  const b = ctx.message.body;
  const text = Buffer.isBuffer(b) ? b.toString() : (b && b.content ? Buffer.from(b.content).toString() : String(b));
  console.log(JSON.stringify({ got: text, count: ctx.message.delivery_count || 0 }));
  ctx.delivery.accept();
  done.got = true;
  maybeClose();
});
conn.on('connection_close', () => process.exit(0));
conn.on('disconnected', (ctx) => { if (ctx.error) { console.error(String(ctx.error)); process.exit(2); } });
