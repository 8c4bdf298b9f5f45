// Felix's browser client: an ES module with no dependencies and no build
// step. It speaks the broker's browser framing (package webfront) over
// WebTransport where the runtime has it and the broker serves it
// (options.webTransport), else over WebSocket: auth with a Felix token,
// subscribe as an async iterator, acked publish, range reads, and on a
// lost connection it reconnects (WebTransport first again) and resumes each
// subscription of a durable stream after the last offset it delivered.

import { encode, decode } from './msgpack.js';

const KIND_CONTROL = 0x01;
const KIND_EVENTS = 0x02;
const FLAG_OFFSETS = 0x20;

/** The broker ended a subscription itself (its queue overflowed, its shard stopped). */
export const CODE_SUBSCRIPTION_ENDED = 0x10;
/** The token expired: the broker ended the connection's subscriptions. */
export const CODE_UNAUTHENTICATED = 0x11;

/**
 * An error the broker answered with: felix/1's code, its name
 * (unauthenticated, forbidden, not_found, invalid_request, overloaded, ...)
 * and retry class, or a refused connection's WebSocket close.
 */
export class FelixError extends Error {
  /**
   * @param {string} name
   * @param {string} message
   * @param {{code?: number, retry?: number, closeCode?: number}} [info]
   */
  constructor(name, message, info = {}) {
    super(`${name}: ${message}`);
    this.code = info.code ?? 0;
    this.reason = name;
    this.retry = info.retry ?? 0;
    this.closeCode = info.closeCode ?? 0;
  }
}

/**
 * Connects and authenticates. The promise rejects with a FelixError when
 * the broker refuses the token or the page's origin.
 * @param {import('./felix').ConnectOptions} options
 * @returns {Promise<Client>}
 */
export async function connect(options) {
  const c = new Client(options);
  await c._open();
  return c;
}

export class Client {
  /** @param {import('./felix').ConnectOptions} options */
  constructor(options) {
    if (!options || !options.url) throw new TypeError('connect: options.url is required (ws://host:port/)');
    this._opts = {
      tenant: 'default',
      token: '',
      reconnect: true,
      reconnectDelayMs: 200,
      reconnectMaxDelayMs: 5000,
      ...options,
    };
    this._WS = options.WebSocket ?? globalThis.WebSocket;
    this._WT = options.webTransport ? (options.WebTransport ?? globalThis.WebTransport) : undefined;
    if (!this._WS && !this._WT) throw new TypeError('connect: this runtime has no WebSocket; pass options.WebSocket (Node 20: the ws package)');
    /** Which transport the connection is on: "webtransport" or "websocket". */
    this.transport = '';
    /** Called once a lost connection is back and its subscriptions resumed. */
    this.onreconnect = null;
    this._nextID = 0;
    /** @type {Map<number, {resolve: Function, reject: Function}>} */
    this._pending = new Map();
    /** @type {Map<number, Subscription>} broker subscription id -> subscription */
    this._subs = new Map();
    /** @type {Map<number, Function[]>} subscription id -> events streams waiting for its reply */
    this._early = new Map();
    this._closed = false;
    this._link = null;
    this._reconnecting = null;
  }

  /**
   * Connects and authenticates: over WebTransport when it can, else over
   * WebSocket. A WebTransport session that cannot be had (no UDP path, a
   * certificate the hash does not match) falls back; one the broker
   * refused (a token, an origin) does not, as WebSocket would be refused
   * the same.
   */
  async _open() {
    this.lastWebTransportError = undefined;
    if (this._WT) {
      try {
        // A function is asked again on every connect: a broker that
        // restarted serves a new short-lived certificate, with a new hash.
        const wt = this._opts.webTransport;
        await this._openWith(openWebTransport(this._WT, typeof wt === 'function' ? await wt() : wt, this));
        this.transport = 'webtransport';
        return;
      } catch (err) {
        if (err instanceof FelixError && (err.code !== 0 || err.closeCode === 1008)) throw err; // the broker's refusal
        if (!this._WS) throw err;
        this.lastWebTransportError = err;
      }
    }
    await this._openWith(openWebSocket(this._WS, this._opts.url, this));
    this.transport = 'websocket';
  }

  /** Sends the auth on link once open; resolves when the broker accepts it. */
  _openWith(link) {
    return new Promise((resolve, reject) => {
      this._link = link;
      let authed = false;
      let refusal = null;
      link.onopen = () => {
        this._request({ op: 'auth', tenant: this._opts.tenant, token: this._opts.token }).then(
          () => { authed = true; resolve(); },
          (err) => { refusal = err; link.close(); },
        );
      };
      link.onclose = (code, reason) => {
        if (this._link !== link) return;
        const err = refusal ?? closeError(code, reason);
        if (refusal) refusal.closeCode = code;
        this._failPending(err);
        this._early.clear();
        if (!authed) {
          reject(err);
          return;
        }
        this._lost(err);
      };
    });
  }

  // _request sends msg; onReply, when given, runs on the reply before the
  // promise settles, while the frame is handled: a continuation of the
  // promise runs later, after frames that came in the same read (Node's ws
  // emits them back to back), which would find no subscription for their id.
  _request(msg, onReply) {
    const id = ++this._nextID;
    const body = encode({ ...msg, id });
    const frame = new Uint8Array(1 + body.length);
    frame[0] = KIND_CONTROL;
    frame.set(body, 1);
    return new Promise((resolve, reject) => {
      this._pending.set(id, { resolve, reject, onReply });
      try {
        this._link.send(frame);
      } catch (e) {
        this._pending.delete(id);
        reject(e);
      }
    });
  }

  _onFrame(b) {
    if (b[0] === KIND_EVENTS) {
      this._onEvents(b);
      return;
    }
    if (b[0] !== KIND_CONTROL) return;
    const m = decode(b.subarray(1));
    if (m.op === 'ended') {
      this._subs.get(Number(m.sub))?._ended(m.code ?? 0);
      return;
    }
    const p = this._pending.get(Number(m.id ?? 0));
    if (!p) return; // an answer to no request: a malformed frame of ours
    this._pending.delete(Number(m.id));
    if (m.error) p.reject(new FelixError(m.error.name, m.error.message, { code: m.error.code, retry: m.error.retry }));
    else {
      p.onReply?.(m);
      p.resolve(m);
    }
  }

  _onEvents(b) {
    const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const id = Number(v.getBigUint64(1));
    this._subs.get(id)?._push(id, decodeEvents(b, v));
  }

  /**
   * Resolves with subscription id's Subscription once its reply is
   * handled: over WebTransport its events stream may arrive first.
   */
  _subscription(id) {
    const s = this._subs.get(id);
    if (s) return Promise.resolve(s);
    return new Promise((resolve) => {
      const waiting = this._early.get(id) ?? [];
      waiting.push(resolve);
      this._early.set(id, waiting);
    });
  }

  _registered(s) {
    this._subs.set(s.id, s);
    for (const resolve of this._early.get(s.id) ?? []) resolve(s);
    this._early.delete(s.id);
  }

  _failPending(err) {
    for (const p of this._pending.values()) p.reject(err);
    this._pending.clear();
  }

  /** The connection was lost after the auth: reconnect and resubscribe, or end everything. */
  _lost(err) {
    if (this._closed) return;
    const subs = [...this._subs.values()];
    this._subs.clear();
    if (!this._opts.reconnect) {
      for (const s of subs) s._fail(err);
      return;
    }
    this._reconnecting = this._reconnect(subs);
  }

  async _reconnect(subs) {
    let delay = this._opts.reconnectDelayMs;
    for (;;) {
      if (this._closed) return;
      await new Promise((r) => setTimeout(r, delay));
      try {
        await this._open();
        break;
      } catch (err) {
        if (err instanceof FelixError && (err.reason === 'unauthenticated' || err.reason === 'forbidden')) {
          for (const s of subs) s._fail(err);
          return;
        }
        delay = Math.min(delay * 2, this._opts.reconnectMaxDelayMs);
      }
    }
    for (const s of subs) {
      try {
        await s._resubscribe();
      } catch (err) {
        s._fail(err);
      }
    }
    this._reconnecting = null;
    this.onreconnect?.();
  }

  /**
   * Subscribes to one shard of a stream.
   * @param {string} stream
   * @param {import('./felix').SubscribeOptions} [options]
   * @returns {Promise<Subscription>}
   */
  async subscribe(stream, options = {}) {
    const s = new Subscription(this, stream, options);
    await s._subscribe(options.start ?? 'latest', options.offset ?? 0);
    return s;
  }

  /**
   * Publishes one payload or several (one batch, one shard); resolves once
   * the broker handled it, with the first record's offset on a durable stream.
   * @param {string} stream
   * @param {Uint8Array|string|Array<Uint8Array|string>} payloads
   * @param {import('./felix').PublishOptions} [options]
   * @returns {Promise<{offset?: number, durable: boolean}>}
   */
  async publish(stream, payloads, options = {}) {
    const list = (Array.isArray(payloads) ? payloads : [payloads]).map(bytesOf);
    const msg = { op: 'publish', ns: options.namespace ?? 'default', stream, payloads: list };
    if (options.key !== undefined) msg.key = bytesOf(options.key);
    const r = await this._request(msg);
    return r.durable ? { offset: Number(r.offset ?? 0), durable: true } : { durable: false };
  }

  /**
   * Reads one page of a durable shard's committed records.
   * @param {string} stream
   * @param {import('./felix').ReadOptions} [options]
   */
  async read(stream, options = {}) {
    const r = await this._request({ op: 'read', ns: options.namespace ?? 'default', stream, shard: options.shard ?? 0, from: options.from ?? 0, max: options.max ?? 0 });
    return {
      records: (r.records ?? []).map((x) => ({ offset: Number(x.offset), payload: x.value, time: new Date(Number(x.time_ms)) })),
      next: Number(r.next ?? 0),
      committed: Number(r.committed ?? 0),
    };
  }

  /** Closes the connection; every subscription's iterator finishes. */
  close() {
    this._closed = true;
    for (const s of this._subs.values()) {
      s._streamDone = true;
      s._ended(0);
    }
    this._subs.clear();
    this._link?.close();
  }
}

/**
 * One subscription: an async iterator of {payload, offset} (offset on
 * durable streams only). After a reconnect it resumes after the last
 * offset it delivered; an in-memory stream resumes from latest.
 */
export class Subscription {
  constructor(client, stream, options) {
    this._c = client;
    this._stream = stream;
    this._ns = options.namespace ?? 'default';
    this._shard = options.shard ?? 0;
    this.id = 0;
    this.durable = false;
    /** The offset of the last event delivered, or undefined. */
    this.lastOffset = undefined;
    this._resumeAt = undefined;
    this._queue = [];
    this._capacity = options.queueCapacity ?? 8192;
    if (!(this._capacity >= 2)) throw new TypeError('subscribe: options.queueCapacity is at least 2');
    /** In-memory streams: events dropped because the page did not keep up. */
    this.dropped = 0;
    /** Durable streams: times the subscription paused on a full queue and resumed. */
    this.pauses = 0;
    this._paused = false;
    this._waiter = null;
    this._done = false;
    this._err = null;
  }

  async _subscribe(start, offset) {
    await this._c._request({ op: 'subscribe', ns: this._ns, stream: this._stream, shard: this._shard, start, offset }, (r) => {
      this.id = Number(r.sub);
      this.durable = !!r.durable;
      if (this.durable && this._resumeAt === undefined) this._resumeAt = Number(r.start_offset ?? 0);
      this._streamDone = false;
      this._endCode = undefined;
      this._c._registered(this);
    });
  }

  _resubscribe() {
    if (this.durable) return this._subscribe('offset', this._resumeAt);
    return this._subscribe('latest', 0);
  }

  // _push queues what the broker sent, up to the queue's capacity: a page
  // that does not read would otherwise hold every event in memory, since
  // neither a WebSocket nor this client's WebTransport reader pushes back.
  // Past it, an in-memory stream drops (counted in dropped), as the
  // broker's own drop-new queues do; a durable one pauses: it leaves the
  // broker, and once the page has read half the queue it subscribes again
  // after the last event queued, so nothing is lost or repeated.
  _push(id, events) {
    if (id !== this.id) return; // an earlier subscription's, still in flight
    for (const e of events) {
      if (this._paused) break;
      // A resumed subscription may be sent again what it already had.
      if (e.offset !== undefined && this._resumeAt !== undefined && e.offset < this._resumeAt) continue;
      if (this._queue.length >= this._capacity) {
        if (!this.durable) {
          this.dropped++;
          continue;
        }
        this._pause();
        break;
      }
      if (e.offset !== undefined) {
        this.lastOffset = e.offset;
        this._resumeAt = e.offset + 1;
      }
      this._queue.push(e);
    }
    this._wake();
  }

  _pause() {
    const id = this.id;
    this._paused = true;
    this.pauses++;
    this.id = 0; // what the left subscription still sends is not this one's
    this._c._subs.delete(id);
    this._c._request({ op: 'unsubscribe', sub: id }).catch(() => {});
  }

  // _drained runs as the page takes an event: a paused subscription
  // resumes once half its queue is read, after a reconnection under way.
  _drained() {
    if (!this._paused || this._resuming || this._queue.length > this._capacity / 2) return;
    this._resuming = (async () => {
      try {
        await this._c._reconnecting;
        if (this._done || this._c._closed) return;
        // Before the request: its events may come before its reply.
        this._paused = false;
        await this._resubscribe();
      } catch (err) {
        this._fail(err);
      } finally {
        this._resuming = null;
      }
    })();
  }

  // _ended is the broker's ended frame. Over WebTransport a clean end
  // waits for the events stream to finish, which the broker does before it
  // says ended, so no event still on the way is lost.
  _ended(code) {
    if (code === 0 && this._c.transport === 'webtransport' && !this._streamDone) {
      this._endCode = 0;
      return;
    }
    this._c._subs.delete(this.id);
    if (code === 0) this._done = true;
    else this._err = new FelixError(code === CODE_UNAUTHENTICATED ? 'unauthenticated' : 'subscription_ended', `the broker ended subscription ${this.id} (stream code 0x${code.toString(16)})`, { code });
    this._wake();
  }

  /** The subscription's WebTransport events stream finished. */
  _streamFinished(id) {
    if (id !== this.id) return;
    this._streamDone = true;
    if (this._endCode === 0) this._ended(0);
  }

  _fail(err) {
    this._err = err;
    this._wake();
  }

  _wake() {
    const w = this._waiter;
    this._waiter = null;
    w?.();
  }

  /** Ends the subscription. */
  async unsubscribe() {
    this._done = true;
    this._wake();
    if (this._c._subs.has(this.id)) await this._c._request({ op: 'unsubscribe', sub: this.id });
  }

  /** @returns {AsyncIterator<{payload: Uint8Array, offset?: number}>} */
  [Symbol.asyncIterator]() {
    return {
      next: async () => {
        for (;;) {
          if (this._queue.length > 0) {
            const value = this._queue.shift();
            this._drained();
            return { value, done: false };
          }
          if (this._err) throw this._err;
          if (this._done) return { value: undefined, done: true };
          await new Promise((r) => { this._waiter = r; });
        }
      },
      return: async () => {
        await this.unsubscribe().catch(() => {});
        return { value: undefined, done: true };
      },
    };
  }
}

function bytesOf(p) {
  if (p instanceof Uint8Array) return p;
  if (typeof p === 'string') return new TextEncoder().encode(p);
  throw new TypeError('a payload is a Uint8Array or a string');
}

// closeError reads a close frame (or a WebTransport session's close,
// whose codes are the same): the broker's refusals (1008) carry
// "name: message" as the reason.
function closeError(code, reason) {
  let name = code === 1009 ? 'frame_too_large' : code === 1008 ? 'refused' : 'connection_lost';
  let message = reason || `connection closed (status ${code})`;
  const colon = reason ? reason.indexOf(': ') : -1;
  if (code === 1008 && colon > 0) {
    name = reason.slice(0, colon);
    message = reason.slice(colon + 2);
  }
  return new FelixError(name, message, { closeCode: code });
}

// decodeEvents decodes an events frame's batch (v views b).
function decodeEvents(b, v) {
  const flags = v.getUint16(9);
  let at = 11;
  let base = null;
  if (flags & FLAG_OFFSETS) {
    base = Number(v.getBigUint64(at));
    at += 8;
  }
  const count = v.getUint32(at);
  at += 4;
  const events = [];
  for (let i = 0; i < count; i++) {
    const n = v.getUint32(at);
    at += 4;
    events.push({ payload: b.slice(at, at + n), offset: base === null ? undefined : base + i });
    at += n;
  }
  return events;
}

// A link is one connection's transport as Client sees it: send(frame),
// close(), and the callbacks onopen() and onclose(code, reason).

// openWebSocket: every frame one binary message.
function openWebSocket(WS, url, client) {
  const ws = new WS(url);
  ws.binaryType = 'arraybuffer';
  const link = {
    onopen: () => {},
    onclose: () => {},
    send: (frame) => ws.send(frame),
    close: () => ws.close(1000, 'client closed'),
  };
  ws.onopen = () => link.onopen();
  ws.onmessage = (ev) => client._onFrame(new Uint8Array(ev.data));
  ws.onerror = () => {};
  ws.onclose = (ev) => link.onclose(ev.code, ev.reason);
  return link;
}

// openWebTransport: the control frames on one bidirectional stream and
// each subscription's events on a stream of the broker's, every frame after
// a u32 length. opts: {url, certificateHashes: [hex SHA-256, ...]}, the
// hashes (from the admin endpoint's /ui/config) for a self-signed
// certificate, none for a real one.
function openWebTransport(WT, opts, client) {
  const init = {};
  const hashes = (opts.certificateHashes ?? []).filter(Boolean);
  if (hashes.length > 0) init.serverCertificateHashes = hashes.map((h) => ({ algorithm: 'sha-256', value: hexBytes(h) }));
  const wt = new WT(opts.url, init);
  let writer = null;
  let closed = false;
  const link = {
    onopen: () => {},
    onclose: () => {},
    send: (frame) => {
      if (!writer) throw new FelixError('connection_lost', 'the WebTransport session is not open');
      writer.write(withLength(frame)).catch(() => {});
    },
    close: () => { try { wt.close({ closeCode: 0, reason: 'client closed' }); } catch { /* already closed */ } },
  };
  const end = (code, reason) => {
    if (closed) return;
    closed = true;
    link.onclose(code, reason);
  };
  wt.closed.then((info) => end(info?.closeCode ?? 0, info?.reason ?? ''), (e) => end(0, (e && e.message) || 'WebTransport session failed'));
  (async () => {
    await wt.ready;
    const ctrl = await wt.createBidirectionalStream();
    writer = ctrl.writable.getWriter();
    readFrames(ctrl.readable, (frame) => client._onFrame(frame)).catch(() => {});
    acceptEventStreams(wt, client).catch(() => {});
    link.onopen();
  })().catch((e) => {
    link.close();
    end(0, (e && e.message) || 'WebTransport session failed');
  });
  return link;
}

// acceptEventStreams reads each subscription's events stream: its u64 id,
// then its events frames, handed to the subscription once its reply is in.
async function acceptEventStreams(wt, client) {
  const streams = wt.incomingUnidirectionalStreams.getReader();
  for (;;) {
    const { value, done } = await streams.read();
    if (done) return;
    (async () => {
      let sub = null;
      let subID = 0;
      await readFrames(value, (frame) => {
        sub._push(subID, decodeEvents(frame, new DataView(frame.buffer, frame.byteOffset, frame.byteLength)));
      }, async (id) => {
        subID = id;
        sub = await client._subscription(id);
      });
      sub?._streamFinished(subID);
    })().catch(() => {});
  }
}

// readFrames reads length-prefixed frames from a ReadableStream until it
// ends; with onID, the stream starts with a u64 id, handed to it first.
async function readFrames(readable, onFrame, onID) {
  const reader = readable.getReader();
  let buf = new Uint8Array(0);
  let idRead = !onID;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf = concat(buf, value);
    if (!idRead) {
      if (buf.length < 8) continue;
      idRead = true;
      const id = Number(new DataView(buf.buffer, buf.byteOffset, 8).getBigUint64(0));
      buf = buf.subarray(8);
      await onID(id);
    }
    while (buf.length >= 4) {
      const n = new DataView(buf.buffer, buf.byteOffset, 4).getUint32(0);
      if (buf.length < 4 + n) break;
      onFrame(buf.slice(4, 4 + n));
      buf = buf.subarray(4 + n);
    }
  }
}

function concat(a, b) {
  if (a.length === 0) return b;
  const c = new Uint8Array(a.length + b.length);
  c.set(a);
  c.set(b, a.length);
  return c;
}

function withLength(frame) {
  const b = new Uint8Array(4 + frame.length);
  new DataView(b.buffer).setUint32(0, frame.length);
  b.set(frame, 4);
  return b;
}

function hexBytes(h) {
  const b = new Uint8Array(h.length / 2);
  for (let i = 0; i < b.length; i++) b[i] = parseInt(h.slice(2 * i, 2 * i + 2), 16);
  return b;
}
