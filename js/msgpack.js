// A small msgpack codec: what Felix's browser framing uses (maps with
// string keys, strings, integers, booleans, nil, binary, arrays) and no
// more. Integers past Number.MAX_SAFE_INTEGER decode as BigInt; encode a
// BigInt to send one.

const enc = new TextEncoder();
const dec = new TextDecoder();

/**
 * Encodes a value as msgpack.
 * @param {unknown} value
 * @returns {Uint8Array}
 */
export function encode(value) {
  const out = [];
  write(out, value);
  const buf = new Uint8Array(out.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of out) {
    buf.set(p, at);
    at += p.length;
  }
  return buf;
}

function head(code, n, width) {
  const b = new Uint8Array(1 + width);
  b[0] = code;
  const v = new DataView(b.buffer);
  if (width === 1) v.setUint8(1, n);
  else if (width === 2) v.setUint16(1, n);
  else if (width === 4) v.setUint32(1, n);
  return b;
}

function sized(out, n, fix, fixMax, c8, c16, c32) {
  if (fix !== null && n <= fixMax) out.push(Uint8Array.of(fix | n));
  else if (c8 !== null && n < 0x100) out.push(head(c8, n, 1));
  else if (n < 0x10000) out.push(head(c16, n, 2));
  else out.push(head(c32, n, 4));
}

function write(out, v) {
  if (v === null || v === undefined) {
    out.push(Uint8Array.of(0xc0));
  } else if (v === true || v === false) {
    out.push(Uint8Array.of(v ? 0xc3 : 0xc2));
  } else if (typeof v === 'number' || typeof v === 'bigint') {
    writeInt(out, v);
  } else if (typeof v === 'string') {
    const b = enc.encode(v);
    sized(out, b.length, 0xa0, 31, 0xd9, 0xda, 0xdb);
    out.push(b);
  } else if (v instanceof Uint8Array) {
    sized(out, v.length, null, 0, 0xc4, 0xc5, 0xc6);
    out.push(v);
  } else if (Array.isArray(v)) {
    sized(out, v.length, 0x90, 15, null, 0xdc, 0xdd);
    for (const x of v) write(out, x);
  } else if (typeof v === 'object') {
    const keys = Object.keys(v).filter((k) => v[k] !== undefined);
    sized(out, keys.length, 0x80, 15, null, 0xde, 0xdf);
    for (const k of keys) {
      write(out, k);
      write(out, v[k]);
    }
  } else {
    throw new TypeError(`msgpack: cannot encode a ${typeof v}`);
  }
}

function writeInt(out, v) {
  if (typeof v === 'number' && !Number.isInteger(v)) {
    throw new TypeError(`msgpack: ${v} is not an integer (Felix's framing has none)`);
  }
  const n = BigInt(v);
  if (n >= 0n && n <= 0x7fn) {
    out.push(Uint8Array.of(Number(n)));
  } else if (n < 0n && n >= -32n) {
    out.push(Uint8Array.of(Number(n) & 0xff));
  } else if (n >= 0n) {
    const b = new Uint8Array(9);
    b[0] = 0xcf;
    new DataView(b.buffer).setBigUint64(1, n);
    out.push(b);
  } else {
    const b = new Uint8Array(9);
    b[0] = 0xd3;
    new DataView(b.buffer).setBigInt64(1, n);
    out.push(b);
  }
}

/**
 * Decodes one msgpack value that fills bytes.
 * @param {Uint8Array} bytes
 * @returns {any}
 */
export function decode(bytes) {
  const r = { b: bytes, v: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength), at: 0 };
  const value = read(r, 0);
  if (r.at !== bytes.length) throw new RangeError(`msgpack: ${bytes.length - r.at} trailing bytes`);
  return value;
}

function need(r, n) {
  if (r.at + n > r.b.length) throw new RangeError('msgpack: truncated value');
}

function u(r, width) {
  need(r, width);
  const at = r.at;
  r.at += width;
  if (width === 1) return r.v.getUint8(at);
  if (width === 2) return r.v.getUint16(at);
  return r.v.getUint32(at);
}

function big(n) {
  return n <= BigInt(Number.MAX_SAFE_INTEGER) && n >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(n) : n;
}

function bytes(r, n) {
  need(r, n);
  const b = r.b.subarray(r.at, r.at + n);
  r.at += n;
  return b;
}

function read(r, depth) {
  if (depth > 16) throw new RangeError('msgpack: nested too deep');
  need(r, 1);
  const c = r.b[r.at++];
  if (c <= 0x7f) return c;
  if (c >= 0xe0) return c - 0x100;
  if (c >= 0x80 && c <= 0x8f) return readMap(r, c & 0x0f, depth);
  if (c >= 0x90 && c <= 0x9f) return readArray(r, c & 0x0f, depth);
  if (c >= 0xa0 && c <= 0xbf) return dec.decode(bytes(r, c & 0x1f));
  switch (c) {
    case 0xc0: return null;
    case 0xc2: return false;
    case 0xc3: return true;
    case 0xc4: return bytes(r, u(r, 1)).slice();
    case 0xc5: return bytes(r, u(r, 2)).slice();
    case 0xc6: return bytes(r, u(r, 4)).slice();
    case 0xcc: return u(r, 1);
    case 0xcd: return u(r, 2);
    case 0xce: return u(r, 4);
    case 0xcf: need(r, 8); r.at += 8; return big(r.v.getBigUint64(r.at - 8));
    case 0xd0: need(r, 1); return r.v.getInt8(r.at++);
    case 0xd1: need(r, 2); r.at += 2; return r.v.getInt16(r.at - 2);
    case 0xd2: need(r, 4); r.at += 4; return r.v.getInt32(r.at - 4);
    case 0xd3: need(r, 8); r.at += 8; return big(r.v.getBigInt64(r.at - 8));
    case 0xca: need(r, 4); r.at += 4; return r.v.getFloat32(r.at - 4);
    case 0xcb: need(r, 8); r.at += 8; return r.v.getFloat64(r.at - 8);
    case 0xd9: return dec.decode(bytes(r, u(r, 1)));
    case 0xda: return dec.decode(bytes(r, u(r, 2)));
    case 0xdb: return dec.decode(bytes(r, u(r, 4)));
    case 0xdc: return readArray(r, u(r, 2), depth);
    case 0xdd: return readArray(r, u(r, 4), depth);
    case 0xde: return readMap(r, u(r, 2), depth);
    case 0xdf: return readMap(r, u(r, 4), depth);
  }
  throw new RangeError(`msgpack: unsupported code 0x${c.toString(16)}`);
}

function readArray(r, n, depth) {
  if (n > r.b.length - r.at) throw new RangeError('msgpack: array claims more than the bytes left');
  const a = new Array(n);
  for (let i = 0; i < n; i++) a[i] = read(r, depth + 1);
  return a;
}

function readMap(r, n, depth) {
  if (2 * n > r.b.length - r.at) throw new RangeError('msgpack: map claims more than the bytes left');
  const m = {};
  for (let i = 0; i < n; i++) {
    const k = read(r, depth + 1);
    m[String(k)] = read(r, depth + 1);
  }
  return m;
}
