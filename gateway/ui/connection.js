// The dashboard's link to the gateway: one WebSocket, the protocol v4 handshake, requests matched
// to responses by id, and reconnection with backoff.
//
// States (`phase`): connecting -> handshaking -> ready; any close moves to `reconnecting` (a timer
// with exponential backoff and jitter, cut short when the browser comes back online or the user
// asks), except a refused credential (`auth`, which waits for a new one) and a protocol mismatch
// (`stopped`). Requests made while not ready fail at once with ConnectionLost; requests in flight
// when the socket closes fail the same way. Callers that must survive a drop (sending a message)
// retry with the same idempotency key.

export const PROTOCOL_VERSION = 4;
const CHALLENGE_TIMEOUT_MS = 10_000;
const REQUEST_TIMEOUT_MS = 30_000;
const BACKOFF_BASE_MS = 500;
const BACKOFF_MAX_MS = 15_000;

export class RequestError extends Error {
  /** A response with `ok:false`: `code`, `details`, `retryable`, `retryAfterMs` as sent. */
  constructor(error) {
    super(error?.message || error?.code || "request failed");
    this.name = "RequestError";
    this.code = error?.code || "";
    this.details = error?.details;
    this.retryable = Boolean(error?.retryable);
    this.retryAfterMs = error?.retryAfterMs;
  }
}

export class ConnectionLost extends Error {
  constructor(message = "not connected to the gateway") {
    super(message);
    this.name = "ConnectionLost";
  }
}

const AUTH_CODES = new Set([
  "AUTH_TOKEN_MISSING",
  "AUTH_TOKEN_MISMATCH",
  "AUTH_PASSWORD_MISSING",
  "AUTH_PASSWORD_MISMATCH",
  "AUTH_RATE_LIMITED",
]);

export function backoffDelay(attempt, random = Math.random) {
  const base = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** Math.max(0, attempt - 1));
  return Math.round(base * (0.75 + random() * 0.5));
}

export class GatewayConnection {
  /**
   * @param {object} options
   * @param {string} options.url  ws:// or wss:// URL of the gateway socket
   * @param {() => ({token?: string, password?: string})} options.credentials  read at each handshake
   * @param {object} options.client  `client` block of `connect`
   * @param {(frame: object) => void} options.onEvent  every event frame after the handshake
   * @param {(state: object) => void} options.onState  every phase change (see `state`)
   * @param {(hello: object) => void} options.onReady  after each successful handshake
   * @param {() => void} [options.onGap]  a connection `seq` was skipped (an event was dropped)
   */
  constructor({ url, credentials, client, onEvent, onState, onReady, onGap }) {
    this.url = url;
    this.credentials = credentials;
    this.client = client;
    this.onEvent = onEvent;
    this.onState = onState;
    this.onReady = onReady;
    this.onGap = onGap || (() => {});
    this.socket = null;
    this.hello = null;
    this.phase = "idle";
    this.attempt = 0;
    this.retryAt = 0;
    this.lastError = null;
    this.shutdownNotice = null;
    this._nextId = 1;
    this._pending = new Map();
    this._seq = 0;
    this._retryTimer = null;
    this._challengeTimer = null;
    this._watchdog = null;
    this._lastFrameAt = 0;
    this._tickMs = 30_000;
    this._onOnline = () => {
      if (this.phase === "reconnecting") this.retryNow();
    };
    // Offline, the socket is as good as dead, and its close event may not come for a long time.
    this._onOffline = () => this._abandon("offline");
  }

  get ready() {
    return this.phase === "ready";
  }

  state() {
    return {
      phase: this.phase,
      attempt: this.attempt,
      retryAt: this.retryAt,
      error: this.lastError,
      shutdown: this.shutdownNotice,
      hello: this.hello,
    };
  }

  start() {
    window.addEventListener("online", this._onOnline);
    window.addEventListener("offline", this._onOffline);
    this._open();
  }

  /** Close for good (no reconnect). */
  stop() {
    window.removeEventListener("online", this._onOnline);
    window.removeEventListener("offline", this._onOffline);
    clearTimeout(this._retryTimer);
    this._setPhase("stopped");
    this._teardown("stopped");
  }

  /** Reconnect now instead of waiting for the backoff timer (also after a refused credential). */
  retryNow() {
    clearTimeout(this._retryTimer);
    this._teardown("retry");
    this._open();
  }

  /** Give up the socket as a network failure would; the usual reconnect follows. */
  drop() {
    this._abandon("dropped");
  }

  _abandon(reason) {
    if (!this.socket || this.phase === "auth" || this.phase === "stopped") return;
    this.lastError = { message: `connection ${reason}` };
    this._teardown(reason);
    this._scheduleReconnect();
  }

  /** Send a request; resolves with its payload, rejects with RequestError or ConnectionLost. */
  request(method, params = {}, timeoutMs = REQUEST_TIMEOUT_MS) {
    if (!this.ready || !this.socket) return Promise.reject(new ConnectionLost());
    return this._send(method, params, timeoutMs);
  }

  _send(method, params, timeoutMs) {
    const id = `d${this._nextId++}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this._pending.delete(id);
        reject(new RequestError({ code: "TIMEOUT", message: `${method} timed out`, retryable: true }));
      }, timeoutMs);
      this._pending.set(id, { resolve, reject, timer, method });
      this.socket.send(JSON.stringify({ type: "req", id, method, params }));
    });
  }

  _setPhase(phase) {
    this.phase = phase;
    this.onState(this.state());
  }

  _open() {
    this._seq = 0;
    this.hello = null;
    let socket;
    try {
      socket = new WebSocket(this.url);
    } catch (error) {
      this.lastError = String(error?.message || error);
      this._scheduleReconnect();
      return;
    }
    this.socket = socket;
    this._setPhase("connecting");
    socket.addEventListener("open", () => {
      if (socket !== this.socket) return;
      this._setPhase("handshaking");
      this._challengeTimer = setTimeout(() => this._abandon("got no challenge"), CHALLENGE_TIMEOUT_MS);
    });
    socket.addEventListener("message", (message) => {
      if (socket !== this.socket) return;
      this._lastFrameAt = Date.now();
      let frame;
      try {
        frame = JSON.parse(message.data);
      } catch {
        return;
      }
      this._receive(socket, frame);
    });
    socket.addEventListener("close", (event) => {
      if (socket !== this.socket) return;
      this._closed(event);
    });
  }

  _receive(socket, frame) {
    if (frame.type === "event" && frame.event === "connect.challenge" && this.phase === "handshaking") {
      clearTimeout(this._challengeTimer);
      this._handshake(socket);
      return;
    }
    if (frame.type === "res") {
      const pending = this._pending.get(frame.id);
      if (!pending) return;
      this._pending.delete(frame.id);
      clearTimeout(pending.timer);
      if (frame.ok) pending.resolve(frame.payload);
      else pending.reject(new RequestError(frame.error));
      return;
    }
    if (frame.type !== "event" || this.phase !== "ready") return;
    if (typeof frame.seq === "number") {
      if (this._seq && frame.seq !== this._seq + 1) this.onGap();
      this._seq = frame.seq;
    }
    if (frame.event === "shutdown") this.shutdownNotice = frame.payload || {};
    this.onEvent(frame);
  }

  _handshake(socket) {
    const auth = this.credentials() || {};
    const params = {
      minProtocol: PROTOCOL_VERSION,
      maxProtocol: PROTOCOL_VERSION,
      client: this.client,
      role: "operator",
      scopes: ["operator.read", "operator.write", "operator.admin"],
      caps: ["session-scoped-events", "tool-events", "native-events-only"],
      auth,
    };
    this._send("connect", params, CHALLENGE_TIMEOUT_MS).then(
      (hello) => {
        if (socket !== this.socket) return;
        this.hello = hello;
        this.attempt = 0;
        this.lastError = null;
        this.shutdownNotice = null;
        this._tickMs = hello?.policy?.tickIntervalMs || 30_000;
        this._lastFrameAt = Date.now();
        this._startWatchdog();
        this._setPhase("ready");
        this.onReady(hello);
      },
      (error) => {
        if (socket !== this.socket) return;
        const detail = error?.details?.code || "";
        this.lastError = { code: error.code, detail, message: error.message, retryAfterMs: error.retryAfterMs };
        if (AUTH_CODES.has(detail)) {
          this._teardown("auth");
          this._setPhase("auth");
        } else if (detail === "PROTOCOL_MISMATCH") {
          this._teardown("protocol");
          this._setPhase("stopped");
        }
        // Anything else (gateway starting, timeouts) closes and goes through the reconnect path.
      },
    );
  }

  _startWatchdog() {
    clearInterval(this._watchdog);
    // The gateway ticks every tickIntervalMs; a socket silent for twice that is dead.
    this._watchdog = setInterval(() => {
      if (this.socket && Date.now() - this._lastFrameAt > 2 * this._tickMs) this._abandon("silent");
    }, Math.min(5_000, this._tickMs));
  }

  _closed(event) {
    this.lastError = this.lastError || { message: `connection closed (${event.code})` };
    this._teardown("closed");
    if (this.phase === "auth" || this.phase === "stopped") return;
    this._scheduleReconnect();
  }

  _teardown(reason) {
    clearTimeout(this._challengeTimer);
    clearInterval(this._watchdog);
    const socket = this.socket;
    this.socket = null;
    for (const pending of this._pending.values()) {
      clearTimeout(pending.timer);
      pending.reject(new ConnectionLost(`connection ${reason}`));
    }
    this._pending.clear();
    if (socket && socket.readyState <= WebSocket.OPEN) {
      try {
        socket.close(1000, reason);
      } catch {
        // already closing
      }
    }
  }

  _scheduleReconnect() {
    this.attempt += 1;
    let delay = backoffDelay(this.attempt);
    const hinted = this.shutdownNotice?.restartExpectedMs ?? this.lastError?.retryAfterMs;
    if (typeof hinted === "number" && hinted > delay) delay = Math.min(hinted, BACKOFF_MAX_MS * 2);
    this.retryAt = Date.now() + delay;
    clearTimeout(this._retryTimer);
    this._retryTimer = setTimeout(() => this._open(), delay);
    this._setPhase("reconnecting");
  }
}
