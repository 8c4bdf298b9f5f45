// Types of felix.js, Felix's browser client.

export interface ConnectOptions {
  /** The broker's browser_listen address: ws://host:port/ (wss:// with browser_tls). */
  url: string;
  /** The tenant the token is for (default "default"). */
  tenant?: string;
  /** A Felix token (felix token create); empty under auth none. */
  token?: string;
  /** A WebSocket constructor; default globalThis.WebSocket (Node 20: pass the ws package's). */
  WebSocket?: unknown;
  /**
   * The broker's WebTransport (browser_webtransport_listen), tried first
   * where the runtime has WebTransport; url is https://host:port/, and
   * certificateHashes the hex SHA-256 the admin endpoint's /ui/config
   * gives (webtransport_cert_sha256) when the broker's certificate is
   * self-signed. Without it, or when the session cannot be had, WebSocket.
   * A function is called on every connect and reconnect, so that a page
   * can fetch the hash again (a restarted broker has a new certificate).
   */
  webTransport?: WebTransportTarget | (() => Promise<WebTransportTarget>);
  /** A WebTransport constructor; default globalThis.WebTransport. */
  WebTransport?: unknown;
  /** Reconnect after a lost connection and resume subscriptions (default true). */
  reconnect?: boolean;
  /** First delay before reconnecting (200 ms), doubled up to reconnectMaxDelayMs (5000 ms). */
  reconnectDelayMs?: number;
  reconnectMaxDelayMs?: number;
}

export interface WebTransportTarget {
  url: string;
  certificateHashes?: string[];
}

export interface SubscribeOptions {
  namespace?: string;
  shard?: number;
  /** Where to begin: "latest" (default), "earliest" or "offset" (durable streams). */
  start?: 'latest' | 'earliest' | 'offset';
  offset?: number;
  /**
   * Events held for the page before it reads them (default 8192). When full,
   * an in-memory stream drops what comes (counted in Subscription.dropped);
   * a durable one leaves the broker and subscribes again after the last
   * event held once the page has read half (Subscription.pauses).
   */
  queueCapacity?: number;
}

export interface PublishOptions {
  namespace?: string;
  /** Picks the shard through the stream's routing. */
  key?: Uint8Array | string;
}

export interface ReadOptions {
  namespace?: string;
  shard?: number;
  from?: number;
  /** At most this many records (0: the broker's cap). */
  max?: number;
}

export interface Event {
  payload: Uint8Array;
  /** The record's offset, on a durable stream. */
  offset?: number;
}

export interface PublishResult {
  /** The first record's offset, on a durable stream. */
  offset?: number;
  durable: boolean;
}

export interface ReadRecord {
  offset: number;
  payload: Uint8Array;
  time: Date;
}

export declare const CODE_SUBSCRIPTION_ENDED: number;
export declare const CODE_UNAUTHENTICATED: number;

export declare class FelixError extends Error {
  /** felix/1's error code, or the stream code that ended a subscription. */
  code: number;
  /** unauthenticated, forbidden, not_found, invalid_request, overloaded, frame_too_large, connection_lost, ... */
  reason: string;
  retry: number;
  /** The WebSocket close status (or WebTransport session close code) of a refused connection, else 0. */
  closeCode: number;
}

export declare class Subscription implements AsyncIterable<Event> {
  readonly id: number;
  readonly durable: boolean;
  /** The offset of the last event delivered (durable streams). */
  readonly lastOffset: number | undefined;
  /** In-memory streams: events dropped because the queue was full. */
  readonly dropped: number;
  /** Durable streams: times the subscription paused on a full queue, then resumed. */
  readonly pauses: number;
  unsubscribe(): Promise<void>;
  [Symbol.asyncIterator](): AsyncIterator<Event>;
}

export declare class Client {
  /** The transport the connection is on: "webtransport" or "websocket". */
  readonly transport: 'webtransport' | 'websocket';
  /** Why WebTransport was not used, when it was tried and failed. */
  readonly lastWebTransportError?: Error;
  /** Called once a lost connection is back and its subscriptions resumed (transport may have changed). */
  onreconnect: (() => void) | null;
  subscribe(stream: string, options?: SubscribeOptions): Promise<Subscription>;
  publish(stream: string, payloads: Uint8Array | string | Array<Uint8Array | string>, options?: PublishOptions): Promise<PublishResult>;
  read(stream: string, options?: ReadOptions): Promise<{ records: ReadRecord[]; next: number; committed: number }>;
  close(): void;
}

export declare function connect(options: ConnectOptions): Promise<Client>;
