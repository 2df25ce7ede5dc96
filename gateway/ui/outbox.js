// Messages typed in the dashboard that are not yet in a transcript. Each has its idempotency key
// from the moment it is typed, so re-sending after a dropped connection or a reload can never run
// it twice (the gateway answers a repeated key with the first outcome).
//
// Item states: sending (no answer yet: sent again after each reconnect), accepted (the gateway
// took it; it disappears when its user message is committed, or when the session has run and
// gone idle again, e.g. when `collect` merged it into another message), failed (refused; the user
// may retry or dismiss it). Kept in sessionStorage so a reload keeps them.

import { ConnectionLost } from "./connection.js";
import { randomId } from "./dom.js";

const STORAGE_KEY = "gateway.dashboard.outbox";

export class Outbox {
  constructor(onChange) {
    this.onChange = onChange;
    this.items = load();
  }

  forSession(sessionId) {
    return this.items.filter((item) => item.sessionId === sessionId);
  }

  add({ sessionId, sessionKey, text, queueMode }) {
    const item = {
      idempotencyKey: `dash-${randomId()}`,
      sessionId,
      sessionKey,
      text,
      queueMode: queueMode || null,
      state: "sending",
      disposition: null,
      error: null,
      sawRunning: false,
      at: Date.now(),
    };
    this.items.push(item);
    this._changed();
    return item;
  }

  /** Send (or send again) one item; safe to call repeatedly. */
  dispatch(connection, item) {
    if (!connection.ready || item.state !== "sending" || item.inFlight) return;
    item.inFlight = true;
    const params = { sessionKey: item.sessionKey, message: item.text, idempotencyKey: item.idempotencyKey };
    if (item.queueMode) params.queueMode = item.queueMode;
    connection
      .request("chat.send", params)
      .then((answer) => {
        item.inFlight = false;
        if (["ok", "error", "aborted"].includes(answer?.status)) {
          // A repeat of a key whose run already ended: its messages are in the transcript.
          this.remove(item);
          return;
        }
        item.state = "accepted";
        item.disposition = answer?.queued || "queued";
        this._changed();
      })
      .catch((error) => {
        item.inFlight = false;
        if (error instanceof ConnectionLost) return; // sent again after the reconnect
        if (error.retryable) {
          // Busy or rate-limited: the same key again a little later.
          setTimeout(() => this.dispatch(connection, item), Math.min(error.retryAfterMs || 1000, 10_000));
          return;
        }
        item.state = "failed";
        item.error = error.message;
        this._changed();
      });
  }

  flush(connection) {
    for (const item of this.items) this.dispatch(connection, item);
  }

  retry(connection, item) {
    item.state = "sending";
    item.error = null;
    this._changed();
    this.dispatch(connection, item);
  }

  remove(item) {
    const before = this.items.length;
    this.items = this.items.filter((other) => other !== item);
    if (this.items.length !== before) this._changed();
  }

  /** Drop accepted items the transcript now shows (see the module comment). */
  reconcile(transcript) {
    const committed = new Set();
    for (const message of transcript.entries.values()) {
      if (message.role === "user" && message.idempotencyKey) committed.add(message.idempotencyKey);
    }
    let changed = false;
    const kept = [];
    for (const item of this.items) {
      if (item.sessionId !== transcript.sessionId) {
        kept.push(item);
        continue;
      }
      if (committed.has(item.idempotencyKey)) {
        changed = true;
        continue;
      }
      if (item.state === "accepted") {
        if (transcript.running) item.sawRunning = true;
        else if (item.sawRunning) {
          changed = true;
          continue;
        }
      }
      kept.push(item);
    }
    if (changed) {
      this.items = kept;
      this._changed();
    }
  }

  _changed() {
    try {
      const stored = this.items.map(({ inFlight, ...rest }) => rest);
      sessionStorage.setItem(STORAGE_KEY, JSON.stringify(stored));
    } catch {
      // Storage disabled: the outbox then lives as long as the page.
    }
    this.onChange();
  }
}

function load() {
  try {
    const items = JSON.parse(sessionStorage.getItem(STORAGE_KEY) || "[]");
    return Array.isArray(items) ? items.filter((item) => item && item.idempotencyKey) : [];
  } catch {
    return [];
  }
}
