// A live feed of one session: its history, then `sessions.events.subscribe {afterSeq}` and the
// events that follow, applied to a Transcript. Implements the resume rule:
//
// - the last applied `sessionSeq` is kept in memory and, with whatever is still streaming, in
//   sessionStorage (a checkpoint, written at most every CHECKPOINT_MS and when the page hides);
// - after a dropped connection the feed resubscribes from its `seq`; after a reload it restores
//   the checkpoint on top of a fresh `chat.history` and resubscribes from the checkpoint's `seq`;
// - while a subscription request is in flight, events of the session are ignored: the gateway
//   replays all of them after its answer (it holds live events until the replay is sent);
// - a gap in `sessionSeq` (a dropped delta) resubscribes from `seq`; a delta of a message whose
//   start is older than what the feed was built from rewinds to an earlier seq and replays;
// - a `compacted` replay starts with `session.snapshot`; the feed applies it and, when its
//   messages carry no entry ids, refetches the history to learn them.

import { ConnectionLost } from "./connection.js";
import { Transcript } from "./transcript.js";

const CHECKPOINT_MS = 250;
const HISTORY_LIMIT = 200;
const FIRST_REWIND = 256;

export function checkpointKey(sessionId) {
  return `gateway.dashboard.checkpoint.${sessionId}`;
}

export function readCheckpoint(sessionId) {
  try {
    const raw = sessionStorage.getItem(checkpointKey(sessionId));
    return raw ? JSON.parse(raw) : null;
  } catch {
    return null;
  }
}

export class SessionFeed {
  /**
   * @param {object} options
   * @param {import("./connection.js").GatewayConnection} options.connection
   * @param {string} options.sessionId
   * @param {() => string | null} options.keyOf  the session's current key (null when it has none)
   * @param {() => void} options.onChange  the transcript or the feed's state changed
   * @param {(error: Error, what: string) => void} options.onError
   */
  constructor({ connection, sessionId, keyOf, onChange, onError }) {
    this.connection = connection;
    this.sessionId = sessionId;
    this.keyOf = keyOf;
    this.onChange = onChange;
    this.onError = onError;
    this.transcript = new Transcript(sessionId);
    this.loaded = false;
    this.phase = "loading"; // loading | subscribing | live | closed
    this.subscribing = false;
    this.lastSubscribe = null;
    this.replay = null;
    this._token = 0;
    this._floor = 0;
    this._window = FIRST_REWIND;
    this._saveTimer = null;
    this._opening = null;
    this._closed = false;
  }

  /** (Re)attach to the gateway: load the history once, then subscribe from the right seq. */
  open() {
    if (!this._opening) this._opening = this._open().finally(() => (this._opening = null));
    return this._opening;
  }

  async _open() {
    if (this._closed) return;
    if (!this.loaded) {
      this.phase = "loading";
      this.onChange();
      let answer;
      try {
        answer = await this._history({});
      } catch (error) {
        if (!(error instanceof ConnectionLost)) this.onError(error, "history");
        return;
      }
      if (this._closed) return;
      const transcript = this.transcript;
      transcript.loadHistory(answer);
      const historySeq = answer.sessionInfo?.lastSeq ?? 0;
      const saved = readCheckpoint(this.sessionId);
      if (saved && saved.partials?.length && saved.seq <= historySeq) {
        // Something was streaming when the page went away: continue exactly from there.
        transcript.restore(saved);
      } else {
        transcript.seq = historySeq;
      }
      this.loaded = true;
    }
    this._subscribe(this.transcript.seq);
  }

  close() {
    this._closed = true;
    this.phase = "closed";
    this._token += 1;
    this.saveNow();
    clearTimeout(this._saveTimer);
    if (this.connection.ready) {
      this.connection.request("sessions.events.unsubscribe", { sessionId: this.sessionId }).catch(() => {});
    }
  }

  /** The connection dropped: keep the transcript, wait for `open()` after the reconnect. */
  detach() {
    this._token += 1;
    this.subscribing = false;
    if (this.phase !== "closed") this.phase = "loading";
    this.saveNow();
  }

  async loadOlder() {
    const transcript = this.transcript;
    if (!transcript.hasMore || transcript.cursor === null) return;
    const answer = await this._history({ cursor: transcript.cursor });
    transcript.loadHistory(answer, { older: true });
    this.onChange();
  }

  _history(extra) {
    return this.connection.request("chat.history", {
      sessionKey: this.keyOf() || this.sessionId,
      sessionId: this.sessionId,
      limit: HISTORY_LIMIT,
      ...extra,
    });
  }

  _subscribe(afterSeq) {
    const token = ++this._token;
    this.subscribing = true;
    this.phase = "subscribing";
    this._floor = afterSeq;
    this.lastSubscribe = { afterSeq, at: Date.now() };
    this.onChange();
    // Resolved in a microtask right after the answer frame, before any replayed event frame.
    this.connection
      .request("sessions.events.subscribe", { sessionId: this.sessionId, afterSeq })
      .then((answer) => {
        if (token !== this._token) return;
        this.subscribing = false;
        this.phase = "live";
        this.replay = answer.replay;
        this.lastSubscribe = { ...this.lastSubscribe, replay: answer.replay, lastSeq: answer.lastSeq };
        this.onChange();
      })
      .catch((error) => {
        if (token !== this._token) return;
        this.subscribing = false;
        if (error instanceof ConnectionLost) return;
        this.phase = "loading";
        if (error.retryable) {
          setTimeout(() => token === this._token && this._subscribe(afterSeq), error.retryAfterMs || 1000);
          return;
        }
        this.onError(error, "subscribe");
      });
  }

  /** A native `session.*` frame (already known to be for this session). */
  handle(frame) {
    if (this._closed || this.subscribing || this.phase !== "live") return;
    const transcript = this.transcript;
    if (frame.event === "session.snapshot") {
      // Refetched even when every message carries its id: the snapshot has no run status.
      transcript.applySnapshot(frame.payload || {});
      this._refetch();
      this._changed();
      return;
    }
    const outcome = transcript.apply(frame);
    if (outcome === "gap") {
      this._subscribe(transcript.seq);
    } else if (outcome === "headless") {
      this._rewind();
    }
    if (outcome !== "duplicate") this._changed();
  }

  _rewind() {
    const floor = Math.max(0, this._floor - this._window);
    if (this._floor === 0) {
      // Nothing earlier to replay: the start of this message is gone for good.
      this.onError(new Error("the start of a streaming message is no longer available"), "replay");
      return;
    }
    this._window *= 4;
    this.transcript.rewind(floor);
    this._subscribe(floor);
  }

  _refetch() {
    // The snapshot says what was committed but not always the entry ids nor the run status: the
    // history does. Entries committed meanwhile arrive as events and keep their place.
    const since = this.transcript.order.length;
    this._history({})
      .then((answer) => {
        if (this._closed) return;
        this.transcript.loadHistory(answer, { since });
        this._changed();
      })
      .catch((error) => {
        if (!(error instanceof ConnectionLost)) this.onError(error, "history");
      });
  }

  _changed() {
    this.onChange();
    if (!this._saveTimer) {
      this._saveTimer = setTimeout(() => {
        this._saveTimer = null;
        this.saveNow();
      }, CHECKPOINT_MS);
    }
  }

  /** Write the checkpoint now (also called when the page is hidden or unloaded). */
  saveNow() {
    if (!this.loaded) return;
    try {
      sessionStorage.setItem(checkpointKey(this.sessionId), JSON.stringify(this.transcript.checkpoint()));
    } catch {
      // Storage full or disabled: a reload then replays from the history's seq instead.
    }
  }
}
