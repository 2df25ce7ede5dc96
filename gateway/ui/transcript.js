// The state of one session's live view, built only from what the gateway sends: `chat.history`
// pages, native `session.*` events and `session.snapshot`. No DOM here.
//
// Events are applied strictly in `sessionSeq` order: `seq` is the highest sessionSeq applied, an
// event at or below it is a duplicate (ignored), one above `seq + 1` is a gap (refused; the caller
// resubscribes from `seq`). Everything is keyed - committed messages by transcript entry id,
// streaming messages by message id (the same id once committed), tool calls by call id - so a
// replay, a resume or a reload can never show anything twice.
//
// Lifetime: one Transcript per session while the page shows it; `checkpoint()` is what survives a
// reload (sessionStorage), together with `seq`.

export const RESULT_ROLES = new Set(["toolResult", "tool"]);

function entryIdOf(message) {
  const meta = message && message.__gateway;
  return meta && typeof meta.id === "string" ? meta.id : null;
}

export class Transcript {
  constructor(sessionId) {
    this.sessionId = sessionId;
    this.seq = 0;
    /** entry id -> committed message (as chat.history shapes it, with `__gateway`) */
    this.entries = new Map();
    /** committed entry ids in transcript order */
    this.order = [];
    /** message id -> {id, role, base, blocks: [{kind, text}] by contentIndex, incomplete} */
    this.partials = new Map();
    /** tool call id -> {id, name, args, output, result, isError, durationMs, done} */
    this.tools = new Map();
    this.status = "idle";
    this.statusSeq = 0;
    this.runId = null;
    /** notes about the session (errors) placed after the `after`-th committed entry */
    this.notices = [];
    this.hasMore = false;
    this.cursor = null;
    /** key -> revision; a key's node is re-rendered when its revision changes */
    this.revs = new Map();
    /** tool call id -> key of the message that shows it */
    this.toolOwner = new Map();
    /** run id -> ids of the messages it showed (to mark a command's exchange, see `_completed`) */
    this.runMessages = new Map();
  }

  /** Whether `id` is a message the gateway answered itself (a chat command): shown live, never
   * stored in the transcript, so nothing can branch from it. */
  isTransient(id) {
    return Boolean(this.entries.get(id)?.__gateway?.transient);
  }

  get running() {
    return this.status === "running";
  }

  bump(key) {
    this.revs.set(key, (this.revs.get(key) || 0) + 1);
  }

  rev(key) {
    return this.revs.get(key) || 0;
  }

  // --- history ---------------------------------------------------------------------------------

  /**
   * Merge a `chat.history` answer. `older` marks a page fetched with a cursor (it goes before
   * everything known). Otherwise the page is the tail of the transcript when it was read: known
   * entries keep their place and entries committed after it stay after it. `since` is the length
   * of `order` when the request was sent: entries from there on arrived live meanwhile.
   */
  loadHistory(answer, { older = false, since = null } = {}) {
    const ids = [];
    for (const message of answer.messages || []) {
      const id = entryIdOf(message);
      if (!id) continue;
      ids.push(id);
      this._setEntry(id, message);
    }
    const fresh = new Set(ids);
    const first = ids.length ? this.order.indexOf(ids[0]) : -1;
    if (older) {
      this.order = [...ids, ...this.order.filter((id) => !fresh.has(id))];
      this.hasMore = Boolean(answer.hasMore);
      this.cursor = answer.cursor ?? null;
    } else if (!this.order.length || (ids.length && first < 0)) {
      // First load, or a page that does not reach back to what is held (more was committed
      // meanwhile than one page): start over from the page, keeping what arrived live since.
      const live = since === null ? [] : this.order.slice(since).filter((id) => !fresh.has(id));
      this.order = [...ids, ...live];
      this.hasMore = Boolean(answer.hasMore);
      this.cursor = answer.cursor ?? null;
    } else if (ids.length) {
      const before = this.order.slice(0, first).filter((id) => !fresh.has(id));
      const placed = new Set([...before, ...ids]);
      const after = this.order.filter((id) => !placed.has(id));
      this.order = [...before, ...ids, ...after];
    }
    for (const id of this.partials.keys()) if (this.entries.has(id)) this.partials.delete(id);
    const info = answer.sessionInfo;
    if (info && typeof info.lastSeq === "number" && info.lastSeq >= this.statusSeq) {
      this.status = info.hasActiveRun ? "running" : info.status === "running" ? "idle" : info.status || "idle";
      this.statusSeq = info.lastSeq;
    }
  }

  _setEntry(id, message) {
    const known = this.entries.has(id);
    this.entries.set(id, message);
    if (!known) this.bump(id);
    if (Array.isArray(message.content)) {
      for (const block of message.content) {
        if (block && block.type === "toolCall" && block.id) this.toolOwner.set(block.id, id);
      }
    }
    if (RESULT_ROLES.has(message.role) && message.toolCallId) {
      const owner = this.toolOwner.get(message.toolCallId);
      if (owner) this.bump(owner);
    }
  }

  // --- events ----------------------------------------------------------------------------------

  /**
   * Apply one native `session.*` frame. Returns `applied`, `duplicate`, `gap` (an earlier event is
   * missing: resubscribe from `seq`) or `headless` (a delta of a message whose start came before
   * what this transcript was built from: resubscribe from earlier).
   */
  apply(frame) {
    const payload = frame.payload || {};
    const seq = payload.sessionSeq;
    if (typeof seq !== "number") return "duplicate";
    if (seq <= this.seq) return "duplicate";
    if (seq !== this.seq + 1) return "gap";
    const name = frame.event.slice("session.".length);
    if (name === "message.delta" && !this.entries.has(payload.messageId) && !this.partials.has(payload.messageId)) {
      return "headless";
    }
    this._apply(name, payload, seq);
    this.seq = seq;
    return "applied";
  }

  _apply(name, p, seq) {
    switch (name) {
      case "message.started":
        if (!this.entries.has(p.messageId) && !this.partials.has(p.messageId)) {
          this.partials.set(p.messageId, { id: p.messageId, role: p.role, base: "", blocks: [], incomplete: false });
          this.bump(p.messageId);
        }
        break;
      case "message.delta":
        this._delta(p);
        break;
      case "message.completed":
        this._completed(p);
        break;
      case "tool.started":
        this._tool(p.toolCallId, { name: p.toolName, args: p.args, done: false });
        break;
      case "tool.updated":
        this._tool(p.toolCallId, { name: p.toolName, output: p.partialResult });
        break;
      case "tool.finished":
        this._tool(p.toolCallId, {
          name: p.toolName,
          result: p.result,
          isError: Boolean(p.isError),
          durationMs: p.durationMs,
          done: true,
        });
        break;
      case "status.changed":
        this.status = p.status;
        this.statusSeq = seq;
        break;
      case "agent.started":
        this.runId = p.runId ?? null;
        this.status = "running";
        this.statusSeq = seq;
        break;
      case "agent.finished": {
        this.runId = null;
        // A run that failed before its reply was written has no message to show the error on.
        const last = this.entries.get(this.order[this.order.length - 1]);
        const shown = last && last.role === "assistant" && last.errorMessage;
        if (p.errorMessage && !shown && p.terminationReason !== "aborted") {
          this._notice(seq, "error", `The run ended with an error: ${p.errorMessage}`);
        }
        break;
      }
      case "error":
        this._notice(seq, p.recoverable ? "warn" : "error", p.message || p.code || "error");
        break;
      default:
        break;
    }
  }

  /** A note shown after the messages committed so far (lives as long as this transcript). */
  _notice(seq, tone, text) {
    const key = `notice:${seq}`;
    const kept = this.notices.filter((notice) => notice.key !== key).slice(-9);
    this.notices = [...kept, { key, after: this.order.length, tone, text }];
  }

  _delta(p) {
    const partial = this.partials.get(p.messageId);
    if (!partial) return; // already committed: the completed message holds this text
    const index = typeof p.contentIndex === "number" ? p.contentIndex : 0;
    const block = partial.blocks[index] || (partial.blocks[index] = { kind: p.kind, text: "" });
    block.kind = p.kind || block.kind;
    block.text += p.delta || "";
    this.bump(p.messageId);
  }

  _completed(p) {
    const message = p.message;
    if (!message || !p.messageId) return;
    const id = p.messageId;
    const known = this.entries.has(id);
    const withMeta = message.__gateway ? message : { ...message, __gateway: { id, sessionId: this.sessionId } };
    this._setEntry(id, known ? this.entries.get(id) : withMeta);
    if (!known) {
      this.order.push(id);
    }
    if (this.partials.delete(id)) {
      this.bump(id);
    }
    if (p.runId) {
      const ids = this.runMessages.get(p.runId) || [];
      if (!ids.includes(id)) ids.push(id);
      this.runMessages.set(p.runId, ids);
      // A reply the gateway wrote itself (api "gateway") answers a chat command: the command and
      // its answer are not stored, so they are marked (and offer no "Branch here").
      if (message.api === "gateway") {
        for (const shown of ids) {
          const entry = this.entries.get(shown);
          if (entry?.__gateway && !entry.__gateway.transient) {
            this._setEntry(shown, { ...entry, __gateway: { ...entry.__gateway, transient: true } });
            this.bump(shown);
          }
        }
      }
    }
    if (RESULT_ROLES.has(message.role) && message.toolCallId) {
      const tool = this.tools.get(message.toolCallId);
      if (tool && !tool.done) this._tool(message.toolCallId, { done: true, isError: Boolean(message.isError) });
    }
  }

  _tool(id, fields) {
    if (!id) return;
    const current = this.tools.get(id) || { id, name: "", args: undefined, output: null, result: null, done: false };
    const next = { ...current };
    for (const [name, value] of Object.entries(fields)) if (value !== undefined) next[name] = value;
    this.tools.set(id, next);
    const owner = this.toolOwner.get(id);
    if (owner) this.bump(owner);
  }

  // --- resume ----------------------------------------------------------------------------------

  /**
   * Apply a `session.snapshot` (resume after old deltas were pruned). Returns whether every
   * committed message in it carried its entry id (if not, the caller refetches the history).
   * A streaming message the snapshot does not cover is kept but marked incomplete: its
   * `message.completed` will replace it with the full text.
   */
  applySnapshot(p) {
    let identified = true;
    for (const message of p.messages || []) {
      const id = entryIdOf(message) || message?.messageId || null;
      if (!id) {
        identified = false;
        continue;
      }
      this._completed({ messageId: id, message });
    }
    const partial = p.partial;
    for (const [id, held] of this.partials) {
      if (!partial || partial.messageId !== id) {
        held.incomplete = true;
        this.bump(id);
      }
    }
    if (partial && partial.messageId && !this.entries.has(partial.messageId)) {
      this.partials.set(partial.messageId, {
        id: partial.messageId,
        role: partial.role || "assistant",
        base: partial.text || "",
        blocks: [],
        incomplete: false,
      });
      this.bump(partial.messageId);
    }
    if (typeof p.sessionSeq === "number") this.seq = Math.max(this.seq, p.sessionSeq);
    return identified;
  }

  /** Forget streaming state and go back to `seq` (a replay from there rebuilds it exactly). */
  rewind(seq) {
    for (const id of this.partials.keys()) this.bump(id);
    this.partials.clear();
    this.seq = Math.min(this.seq, seq);
    this.statusSeq = Math.min(this.statusSeq, seq);
  }

  /** What a reload needs to continue from `seq` without a replay: streaming messages and tools. */
  checkpoint() {
    const tools = [...this.tools.values()].filter((tool) => !tool.done);
    return {
      sessionId: this.sessionId,
      seq: this.seq,
      status: this.status,
      runId: this.runId,
      partials: [...this.partials.values()],
      tools,
    };
  }

  /** Restore a checkpoint on top of a freshly loaded history. */
  restore(checkpoint) {
    this.seq = checkpoint.seq;
    this.status = checkpoint.status || this.status;
    this.statusSeq = checkpoint.seq;
    this.runId = checkpoint.runId ?? null;
    for (const partial of checkpoint.partials || []) {
      if (!this.entries.has(partial.id)) {
        this.partials.set(partial.id, { ...partial, blocks: (partial.blocks || []).map((b) => b && { ...b }) });
        this.bump(partial.id);
      }
    }
    for (const tool of checkpoint.tools || []) {
      if (!this.tools.has(tool.id)) this.tools.set(tool.id, { ...tool });
    }
  }

  // --- views -----------------------------------------------------------------------------------

  /** Ids of tool results shown inside the card of their call (not as messages of their own). */
  resultsShownInCards() {
    const shown = new Map();
    for (const id of this.order) {
      const message = this.entries.get(id);
      if (message && RESULT_ROLES.has(message.role) && this.toolOwner.has(message.toolCallId)) {
        shown.set(message.toolCallId, id);
      }
    }
    return shown;
  }

  /** Plain text of a streaming message (what has arrived so far). */
  static partialText(partial) {
    return (partial.base || "") + partial.blocks.filter((b) => b && b.kind === "text").map((b) => b.text).join("");
  }
}
