// Tests of the client against a real broker over WebSocket. The Go test
// in node_test.go starts the broker and runs this file with:
//   FELIX_WS_URL      the broker's browser_listen, ws://127.0.0.1:port/
//   FELIX_TOKEN       a token for tenant default
//   FELIX_CONTROL_URL POST /restart?stream=S&n=N restarts the broker on the
//                     same port and data directory, then publishes N
//                     records after-0.. to S with the Go client.
// Run them with `go test ./js/` (after `npm ci` here).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { connect, FelixError } from '../felix.js';

const url = process.env.FELIX_WS_URL;
const token = process.env.FELIX_TOKEN;
const control = process.env.FELIX_CONTROL_URL;
const skip = url ? false : 'FELIX_WS_URL is not set: run these through go test ./js/';
const text = (b) => new TextDecoder().decode(b);

// next takes one event, failing after ms rather than hanging the run.
async function next(it, ms = 10000) {
  let timer;
  const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`no event within ${ms} ms`)), ms); });
  try {
    const r = await Promise.race([it.next(), timeout]);
    assert.equal(r.done, false, 'the subscription ended');
    return r.value;
  } finally {
    clearTimeout(timer);
  }
}

test('publish, subscribe with offsets, read', { skip, timeout: 30000 }, async () => {
  const c = await connect({ url, token, WebSocket, reconnect: false });
  try {
    const sub = await c.subscribe('js-durable', { start: 'earliest' });
    assert.equal(sub.durable, true);
    const it = sub[Symbol.asyncIterator]();
    const acks = [];
    for (let i = 0; i < 50; i++) acks.push(c.publish('js-durable', `m${i}`));
    const results = await Promise.all(acks);
    results.forEach((r, i) => assert.deepEqual(r, { offset: i, durable: true }, `ack ${i}`));
    for (let i = 0; i < 50; i++) {
      const ev = await next(it);
      assert.equal(text(ev.payload), `m${i}`);
      assert.equal(ev.offset, i);
    }
    const page = await c.read('js-durable', { from: 45, max: 10 });
    assert.deepEqual(page.records.map((r) => text(r.payload)), ['m45', 'm46', 'm47', 'm48', 'm49']);
    assert.equal(page.next, 50);
    await sub.unsubscribe();
  } finally {
    c.close();
  }
});

test('in-memory streams: latest, no offsets', { skip, timeout: 30000 }, async () => {
  const c = await connect({ url, token, WebSocket, reconnect: false });
  try {
    const sub = await c.subscribe('js-memory');
    const it = sub[Symbol.asyncIterator]();
    assert.deepEqual(await c.publish('js-memory', ['a', 'b']), { durable: false });
    const a = await next(it);
    const b = await next(it);
    assert.deepEqual([text(a.payload), text(b.payload), a.offset], ['a', 'b', undefined]);
    // Leaving the loop unsubscribes.
    await c.publish('js-memory', 'c');
    for await (const ev of sub) { assert.equal(text(ev.payload), 'c'); break; }
  } finally {
    c.close();
  }
});

test('WebTransport falls back to WebSocket', { skip, timeout: 30000 }, async () => {
  // Node has no WebTransport: with the broker's WebTransport named, the
  // client still connects, over WebSocket.
  const webTransport = { url: 'https://127.0.0.1:1/', certificateHashes: ['00'.repeat(32)] };
  const c = await connect({ url, token, WebSocket, webTransport, reconnect: false });
  try {
    assert.equal(c.transport, 'websocket');
    assert.equal(c.lastWebTransportError, undefined, 'WebTransport tried where the runtime has none');
  } finally {
    c.close();
  }
  // A runtime with WebTransport whose session cannot be had (no UDP path,
  // a certificate that does not match the hash): WebSocket, and why.
  class Unreachable {
    constructor() {
      this.ready = Promise.reject(new Error('QUIC handshake failed'));
      this.closed = Promise.reject(new Error('QUIC handshake failed'));
      this.ready.catch(() => {});
    }
    close() {}
  }
  const d = await connect({ url, token, WebSocket, webTransport, WebTransport: Unreachable, reconnect: false });
  try {
    assert.equal(d.transport, 'websocket');
    assert.match(String(d.lastWebTransportError), /QUIC handshake failed/);
    assert.deepEqual(await d.publish('js-memory', 'after fallback'), { durable: false });
  } finally {
    d.close();
  }
});

test('a wrong token is refused, saying so', { skip, timeout: 30000 }, async () => {
  await assert.rejects(connect({ url, token: 'not-a-token', WebSocket, reconnect: false }), (err) => {
    assert.ok(err instanceof FelixError, `got ${err}`);
    assert.equal(err.reason, 'unauthenticated');
    return true;
  });
});

test('a foreign origin is refused, saying so', { skip, timeout: 30000 }, async () => {
  class FromEvil extends WebSocket {
    constructor(u) { super(u, { origin: 'https://evil.example.net' }); }
  }
  await assert.rejects(connect({ url, token, WebSocket: FromEvil, reconnect: false }), (err) => {
    assert.equal(err.reason, 'forbidden');
    assert.match(err.message, /origin https:\/\/evil\.example\.net is not in browser_allowed_origins/);
    assert.equal(err.closeCode, 1008);
    return true;
  });
});

test('an unknown stream name is refused with the broker error', { skip, timeout: 30000 }, async () => {
  const c = await connect({ url, token, WebSocket, reconnect: false });
  try {
    await assert.rejects(c.publish('bad name!', 'x'), (err) => err.reason === 'invalid_request');
  } finally {
    c.close();
  }
});

test('resume after the broker restarts misses nothing', { skip: skip || (!control && 'FELIX_CONTROL_URL is not set'), timeout: 60000 }, async () => {
  const c = await connect({ url, token, WebSocket, reconnectDelayMs: 100 });
  try {
    const sub = await c.subscribe('js-resume', { start: 'earliest' });
    const it = sub[Symbol.asyncIterator]();
    for (let i = 0; i < 10; i++) await c.publish('js-resume', `before-${i}`);
    const got = [];
    for (let i = 0; i < 10; i++) got.push(await next(it));
    const res = await fetch(`${control}/restart?stream=js-resume&n=10`, { method: 'POST' });
    assert.equal(res.status, 200, await res.text());
    for (let i = 0; i < 10; i++) got.push(await next(it, 20000));
    assert.deepEqual(got.map((e) => e.offset), [...Array(20).keys()]);
    assert.deepEqual(got.slice(10).map((e) => text(e.payload)), [...Array(10).keys()].map((i) => `after-${i}`));
    assert.equal(sub.lastOffset, 19);
  } finally {
    c.close();
  }
});

test('a page that does not read: a durable subscription pauses and resumes, losing nothing', { skip, timeout: 30000 }, async () => {
  const c = await connect({ url, token, WebSocket, reconnect: false });
  try {
    const first = (await c.publish('js-durable', 'mark')).offset;
    const sub = await c.subscribe('js-durable', { start: 'offset', offset: first, queueCapacity: 16 });
    const it = sub[Symbol.asyncIterator]();
    const n = 200;
    await Promise.all(Array.from({ length: n }, (_, i) => c.publish('js-durable', `q${i}`)));
    // Unread, the queue fills and the subscription pauses, holding at
    // most its capacity.
    const deadline = Date.now() + 10000;
    while (sub.pauses === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.ok(sub.pauses > 0, 'a full queue did not pause the subscription');
    assert.ok(sub._queue.length <= 16, `the queue holds ${sub._queue.length} events; its capacity is 16`);
    assert.equal(text((await next(it)).payload), 'mark');
    for (let i = 0; i < n; i++) {
      const ev = await next(it);
      assert.equal(text(ev.payload), `q${i}`);
      assert.equal(ev.offset, first + 1 + i);
    }
    await sub.unsubscribe();
  } finally {
    c.close();
  }
});

test('a page that does not read: an in-memory subscription drops past its queue and counts it', { skip, timeout: 30000 }, async () => {
  const c = await connect({ url, token, WebSocket, reconnect: false });
  try {
    const sub = await c.subscribe('js-memory-full', { queueCapacity: 8 });
    const it = sub[Symbol.asyncIterator]();
    await c.publish('js-memory-full', Array.from({ length: 20 }, (_, i) => `d${i}`));
    await c.publish('js-memory-full', 'last');
    const deadline = Date.now() + 10000;
    while (sub.dropped < 13 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(sub.dropped, 13, 'events dropped past a queue of 8');
    for (let i = 0; i < 8; i++) assert.equal(text((await next(it)).payload), `d${i}`);
  } finally {
    c.close();
  }
});
