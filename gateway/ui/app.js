// The dashboard: wires the connection, the session directory, the live feed of the selected
// session and the page. State lives in the models (SessionDirectory, Transcript, Outbox); the
// page is re-rendered from them (batched to one pass per animation frame).
//
// `window.gatewayDashboard` is this App, for poking at the state from the browser console.

import { SessionActions } from "./actions.js";
import { ApprovalCards } from "./approvals.js";
import { AutomationPanel } from "./automation.js";
import { CommandCompletion } from "./completion.js";
import { forgetCredentials, readCredentials, refusalText, saveCredentials } from "./auth.js";
import { ConnectionLost, GatewayConnection } from "./connection.js";
import { dismissToasts, placeToasts, toast } from "./dialogs.js";
import { formatCost, formatTokens } from "./dom.js";
import { SessionFeed } from "./feed.js";
import { Outbox } from "./outbox.js";
import { renderTranscript, resetTranscriptView } from "./render.js";
import { SessionDirectory, displayName, displayStatus } from "./sessions.js";
import { renderConnection } from "./status.js";
import { renderTree } from "./tree.js";

const DASHBOARD_VERSION = "0.1.0";
const STATUS_EVERY_MS = 5_000;
const LIST_PAGE = 200;
const LIST_MAX = 2_000;
/** Within this many pixels of the end the transcript counts as at the bottom (and follows). */
const NEAR_BOTTOM_PX = 80;
const TOAST_GAP_PX = 12;

const $ = (id) => document.getElementById(id);

// --- the app --------------------------------------------------------------------------------------

class App {
  constructor() {
    this.credentials = readCredentials();
    this.directory = new SessionDirectory();
    this.outbox = new Outbox(() => this.schedule());
    this.feed = null;
    this.selected = this._sessionFromHash();
    this.filter = "";
    this.collapsed = new Set();
    this.openDetails = new Map();
    this.status = null;
    this.statusAt = 0;
    this._statusTimer = null;
    this._frame = 0;
    this._fallback = 0;
    this._treeVersion = -1;
    this._listRefresh = null;
    this._stickToBottom = true;
    this.actions = new SessionActions({
      request: (method, params) => this.connection.request(method, params),
      directory: this.directory,
      currentRow: () => this.currentRow(),
      select: (sessionId) => this.select(sessionId),
      schedule: () => this.schedule(),
    });
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    this.connection = new GatewayConnection({
      url: `${scheme}//${location.host}/`,
      credentials: () => (this.credentials ? { [this.credentials.kind || "token"]: this.credentials.secret } : {}),
      client: {
        id: "dashboard",
        version: DASHBOARD_VERSION,
        platform: "web",
        mode: "ui",
        displayName: "Dashboard",
        instanceId: `dashboard-${Math.random().toString(36).slice(2, 10)}`,
      },
      onEvent: (frame) => this.onEvent(frame),
      onState: (state) => this.onConnectionState(state),
      onReady: (hello) => this.onReady(hello),
      onGap: () => this.refreshListSoon(),
    });
    this.approvals = new ApprovalCards({
      request: (method, params) => this.connection.request(method, params),
      onChange: () => this.schedule(),
    });
    this.automation = new AutomationPanel({
      request: (method, params) => this.connection.request(method, params),
      connected: () => this.connection.ready,
    });
  }

  start() {
    this.bindPage();
    this.render();
    if (this.credentials) this.connection.start();
    else this.askForCredentials(null);
    setInterval(() => this.renderStatus(), 1_000);
    setInterval(() => {
      this._treeVersion = -1; // activity times ("2m ago") move on
      this.schedule();
    }, 30_000);
  }

  // --- connection ---------------------------------------------------------------------------------

  onConnectionState(state) {
    if (state.phase === "auth") this.askForCredentials(state.error);
    if (state.phase !== "ready") {
      clearInterval(this._statusTimer);
      this.feed?.detach();
    }
    this.renderStatus();
    this.schedule();
  }

  async onReady(hello) {
    $("auth-dialog").open && $("auth-dialog").close();
    dismissToasts("connection"); // "the gateway is stopping", "not connected": over now
    this.status = { version: hello?.server?.version, uptimeMs: hello?.snapshot?.uptimeMs };
    this.statusAt = Date.now();
    this.renderStatus();
    this.outbox.flush(this.connection);
    this.automation.onReady();
    this.approvals.onReady();
    clearInterval(this._statusTimer);
    this._statusTimer = setInterval(() => this.refreshStatus(), STATUS_EVERY_MS);
    this.refreshStatus();
    try {
      const since = this.directory.stamp;
      const subscribed = await this.connection.request("sessions.subscribe", {});
      await this.loadList(subscribed?.list, since);
    } catch (error) {
      if (!(error instanceof ConnectionLost)) toast(`Could not list sessions: ${error.message}`, "error");
      return;
    }
    if (this.selected && !this.directory.get(this.selected)) await this.loadTree(this.selected);
    if (!this.selected || !this.directory.get(this.selected)) {
      const first = this.directory.forest()[0];
      this.selected = null;
      if (first) this.select(first.row.sessionId);
    } else if (!this.feed || this.feed.sessionId !== this.selected) {
      this.select(this.selected, { force: true });
    } else {
      this.feed.open();
      this.loadTree(this.selected);
    }
    this.schedule();
  }

  async loadList(first, since = this.directory.stamp) {
    const rows = [];
    let page = first;
    let offset = 0;
    if (!page || page.hasMore) page = await this.connection.request("sessions.list", { limit: LIST_PAGE, offset });
    for (;;) {
      rows.push(...(page.sessions || []));
      if (!page.hasMore || page.nextOffset === null || rows.length >= LIST_MAX) break;
      offset = page.nextOffset;
      page = await this.connection.request("sessions.list", { limit: LIST_PAGE, offset });
    }
    this.directory.replaceAll(rows, since);
  }

  async loadTree(sessionId) {
    try {
      const answer = await this.connection.request("sessions.tree", { sessionId });
      this.directory.addTree(answer.root);
      this.schedule();
    } catch (error) {
      if (error?.code === "NOT_FOUND" && sessionId === this.selected) {
        toast("That session no longer exists.", "error");
        this.selected = null;
        this.feed?.close();
        this.feed = null;
        this.writeHash();
      }
    }
  }

  refreshListSoon() {
    clearTimeout(this._listRefresh);
    this._listRefresh = setTimeout(() => {
      if (!this.connection.ready) return;
      this.loadList(null)
        .then(() => this.selected && this.loadTree(this.selected))
        .catch(() => {});
    }, 500);
  }

  refreshStatusSoon() {
    // Runs started or finished, sessions created: at most one `status` call per burst.
    if (this._statusSoon) return;
    this._statusSoon = setTimeout(() => {
      this._statusSoon = 0;
      this.refreshStatus();
    }, 400);
  }

  async refreshStatus() {
    if (!this.connection.ready) return;
    try {
      this.status = await this.connection.request("status", {});
      this.statusAt = Date.now();
      this.renderStatus();
    } catch {
      // the next poll tries again
    }
  }

  onEvent(frame) {
    const name = frame.event;
    const payload = frame.payload || {};
    if (name.startsWith("session.") && name !== "session.message") {
      if (this.feed && payload.sessionId === this.feed.sessionId) this.feed.handle(frame);
      if (name === "session.status.changed") {
        const row = this.directory.get(payload.sessionId);
        if (row) {
          this.directory.upsert({ ...row, status: payload.status, hasActiveRun: payload.status === "running" });
        }
      }
      return;
    }
    if (name === "sessions.changed") {
      if (payload.deleted) this.directory.remove(payload.sessionId);
      else this.directory.upsert(payload.session || payload);
      // The session that lost its key to a reset or a switch is not announced: list again.
      if (["reset", "switch"].includes(payload.reason)) this.refreshListSoon();
      this.refreshStatusSoon();
      this.schedule();
      return;
    }
    if (name.startsWith("exec.approval.")) {
      this.approvals.onEvent(name, payload);
      return;
    }
    if (name === "cron") {
      this.automation.onEvent(payload);
      return;
    }
    if (name === "shutdown") {
      toast(`The gateway is stopping (${payload.reason || "shutdown"}); the dashboard reconnects when it is back.`, "warn", {
        topic: "connection",
      });
    }
  }

  // --- credentials ------------------------------------------------------------------------------

  askForCredentials(error) {
    const dialog = $("auth-dialog");
    const message = $("auth-error");
    const text = refusalText(error);
    message.textContent = text;
    message.hidden = !text;
    const detail = error?.detail || "";
    $("auth-use-password").checked = detail.startsWith("AUTH_PASSWORD") || this.credentials?.kind === "password";
    this.updateAuthLabels();
    $("auth-secret").value = "";
    if (!dialog.open) dialog.showModal();
    $("auth-secret").focus();
  }

  updateAuthLabels() {
    const password = $("auth-use-password").checked;
    $("auth-label").textContent = password ? "Password" : "Access token";
  }

  submitCredentials(event) {
    event.preventDefault();
    const secret = $("auth-secret").value.trim();
    if (!secret) return;
    this.credentials = { kind: $("auth-use-password").checked ? "password" : "token", secret };
    saveCredentials(this.credentials);
    $("auth-dialog").close();
    if (this.connection.phase === "idle") this.connection.start();
    else this.connection.retryNow();
  }

  signOut() {
    forgetCredentials();
    this.credentials = null;
    this.connection.stop();
    this.connection.phase = "idle";
    this.askForCredentials(null);
    this.renderStatus();
  }

  // --- selection --------------------------------------------------------------------------------

  _sessionFromHash() {
    const match = location.hash.match(/^#\/session\/([^/?#]+)/);
    return match ? decodeURIComponent(match[1]) : null;
  }

  writeHash() {
    const hash = this.selected ? `#/session/${encodeURIComponent(this.selected)}` : "";
    if (location.hash !== hash) history.replaceState(null, "", location.pathname + location.search + hash);
  }

  select(sessionId, { force = false } = {}) {
    if (!force && this.feed && this.feed.sessionId === sessionId) return;
    this.feed?.close();
    this.selected = sessionId;
    this.writeHash();
    this._stickToBottom = true;
    resetTranscriptView($("messages"));
    this.feed = new SessionFeed({
      connection: this.connection,
      sessionId,
      keyOf: () => this.directory.get(sessionId)?.key || null,
      onChange: () => this.schedule(),
      onError: (error, what) => toast(`Live view (${what}): ${error.message}`, "error"),
    });
    document.body.classList.remove("drawer-open");
    $("sidebar-toggle").setAttribute("aria-expanded", "false");
    if (this.connection.ready) {
      this.feed.open();
      this.loadTree(sessionId);
    }
    this.schedule();
  }

  currentRow() {
    return this.selected ? this.directory.get(this.selected) : null;
  }

  // --- actions ----------------------------------------------------------------------------------

  send(event) {
    event?.preventDefault();
    const input = $("composer-input");
    const text = input.value;
    const row = this.currentRow();
    if (!text.trim() || !row) return;
    if (!row.key) {
      toast("This session has no key to send to. Point a key at it with “Switch key…”.", "warn");
      return;
    }
    const running = this.feed?.transcript.running;
    const item = this.outbox.add({
      sessionId: row.sessionId,
      sessionKey: row.key,
      text,
      queueMode: running ? $("queue-mode").value : null,
    });
    input.value = "";
    this._stickToBottom = true;
    this.outbox.dispatch(this.connection, item);
  }

  // --- page ---------------------------------------------------------------------------------------

  bindPage() {
    $("auth-form").addEventListener("submit", (event) => this.submitCredentials(event));
    $("auth-use-password").addEventListener("change", () => this.updateAuthLabels());
    $("auth-dialog").addEventListener("cancel", (event) => event.preventDefault());
    $("sign-out").addEventListener("click", () => this.signOut());
    $("banner-retry").addEventListener("click", () => this.connection.retryNow());
    $("new-session").addEventListener("click", () => this.actions.newSession());
    $("session-filter").addEventListener("input", (event) => {
      this.filter = event.target.value;
      this._treeVersion = -1;
      this.schedule();
    });
    const drawer = (open) => {
      document.body.classList.toggle("drawer-open", open);
      $("sidebar-toggle").setAttribute("aria-expanded", String(open));
    };
    $("sidebar-toggle").addEventListener("click", () => drawer(!document.body.classList.contains("drawer-open")));
    $("scrim").addEventListener("click", () => drawer(false));
    $("composer").addEventListener("submit", (event) => this.send(event));
    // `/` completion; it takes Enter and the arrow keys while its list is open.
    this.completion = new CommandCompletion($("composer-input"), () =>
      this.connection.request("commands.list", { agentId: this.currentRow()?.agentId || "main", scope: "text" }),
    );
    $("composer-input").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) this.send(event);
    });
    $("abort").addEventListener("click", () => this.actions.abort());
    $("action-branch").addEventListener("click", () => this.actions.branch(null));
    $("action-switch").addEventListener("click", () => this.actions.switchKey());
    $("action-compact").addEventListener("click", () => this.actions.compact());
    $("action-reset").addEventListener("click", () => this.actions.reset());
    $("load-older-button").addEventListener("click", () => {
      this._stickToBottom = false;
      this.feed?.loadOlder().catch((error) => toast(`Could not load earlier messages: ${error.message}`, "error"));
    });
    const scroller = $("transcript-scroll");
    scroller.addEventListener("scroll", () => {
      this._stickToBottom = distanceToEnd(scroller) < NEAR_BOTTOM_PX;
      this.updateJump();
    });
    // Scrolling up stops following at once: a smooth scroll's first small step would otherwise
    // count as "still at the bottom" and the next streamed word would pull the view back down.
    // (Not when the wheel scrolls a tool's output or a code block inside the transcript.)
    const scrollsUp = (event) =>
      event.deltaY < 0 && scroller.scrollTop > 0 && !event.target.closest?.(".tool-output, pre.code");
    scroller.addEventListener(
      "wheel",
      (event) => {
        if (scrollsUp(event)) this._stickToBottom = false;
      },
      { passive: true },
    );
    $("jump").addEventListener("click", () => {
      this._stickToBottom = true;
      scroller.scrollTop = scroller.scrollHeight;
      this.updateJump();
    });
    const place = () => this.placeToasts();
    window.addEventListener("resize", place);
    if (globalThis.ResizeObserver) new ResizeObserver(place).observe($("composer"));
    const save = () => this.feed?.saveNow();
    window.addEventListener("pagehide", save);
    document.addEventListener("visibilitychange", () => document.visibilityState === "hidden" && save());
    window.addEventListener("hashchange", () => {
      const target = this._sessionFromHash();
      if (target && target !== this.selected) this.select(target);
    });
  }

  /** Re-render on the next animation frame (or soon, when frames are throttled). */
  schedule() {
    if (this._frame) return;
    this._frame = requestAnimationFrame(() => this.render());
    this._fallback = setTimeout(() => this.render(), 120);
  }

  render() {
    cancelAnimationFrame(this._frame);
    clearTimeout(this._fallback);
    this._frame = 0;
    this._fallback = 0;
    this.renderTree();
    this.renderSession();
    this.approvals.render(this.feed ? this.selected : null);
  }

  renderTree() {
    const version = `${this.directory.version}|${this.selected}|${this.collapsed.size}`;
    if (version === this._treeVersion) return;
    this._treeVersion = version;
    renderTree($("tree"), this.directory, {
      selected: this.selected,
      filter: this.filter,
      collapsed: this.collapsed,
      onSelect: (sessionId) => this.select(sessionId),
      onToggle: (sessionId) => {
        if (!this.collapsed.delete(sessionId)) this.collapsed.add(sessionId);
        this.schedule();
      },
    });
  }

  renderSession() {
    const feed = this.feed;
    $("empty-state").hidden = Boolean(feed);
    $("session").hidden = !feed;
    if (!feed) {
      this.updateJump();
      this.placeToasts();
      return;
    }
    const row = this.currentRow() || { sessionId: feed.sessionId };
    const transcript = feed.transcript;
    $("session").dataset.feed = feed.phase;
    this.outbox.reconcile(transcript);
    const status = feed.loaded ? transcript.status || "idle" : displayStatus(row);
    const running = status === "running";

    $("session-name").textContent = displayName(row);
    const pill = $("session-status");
    pill.textContent = status;
    pill.className = `pill status-${status}`;
    $("session-key").textContent = row.key || "no key";
    const facts = [];
    if (row.kind && row.kind !== "main") facts.push(row.kind === "subagent" ? "sub-agent" : row.kind);
    if (row.model) facts.push(row.model);
    if (typeof row.totalTokens === "number") facts.push(`${formatTokens(row.totalTokens)} tokens`);
    const cost = formatCost(row.cost);
    if (cost && row.cost > 0) facts.push(cost);
    if (row.ownerNode) facts.push(`on node ${row.ownerNode}`);
    if (feed.phase === "loading" && this.connection.ready) facts.push("loading…");
    $("session-facts").textContent = facts.join(" · ");

    const ready = this.connection.ready;
    const hasKey = Boolean(row.key);
    $("action-branch").disabled = !ready || !transcript.order.length;
    $("action-switch").disabled = !ready;
    $("action-compact").disabled = !ready || running;
    $("action-reset").disabled = !ready || !hasKey;
    $("abort").hidden = !running;
    $("abort").disabled = !ready;
    $("queue-mode-wrap").hidden = !running;
    $("send").disabled = !hasKey;
    $("composer-input").disabled = !hasKey;
    $("composer-hint").textContent = !hasKey
      ? "This session has no key; point one at it with “Switch key…” to send."
      : ready
        ? ""
        : "Offline — messages are sent when the connection is back.";

    $("load-older").hidden = !transcript.hasMore;
    const scroller = $("transcript-scroll");
    const stick = this._stickToBottom;
    renderTranscript($("messages"), transcript, {
      pending: this.outbox.forSession(feed.sessionId),
      canBranch: ready,
      awaiting: new Set(this.approvals.forSession(feed.sessionId).map((a) => a.toolCallId)),
      openDetails: this.openDetails,
      actions: {
        branch: (entryId) => this.actions.branch(entryId),
        retry: (item) => this.outbox.retry(this.connection, item),
        dismiss: (item) => this.outbox.remove(item),
      },
    });
    if (stick) scroller.scrollTop = scroller.scrollHeight;
    this.updateJump();
    this.placeToasts();
  }

  /** "↓ Latest" shows exactly when the end of the transcript is out of view. It floats over the
   * transcript (outside its scrolling content), so showing it never moves what it measures. */
  updateJump() {
    const scroller = $("transcript-scroll");
    const away = !$("session").hidden && distanceToEnd(scroller) >= NEAR_BOTTOM_PX;
    $("jump").hidden = !away;
  }

  /** Notes go just above the message box when a session is shown, else near the bottom edge. */
  placeToasts() {
    const composer = $("composer");
    const shown = !$("session").hidden && composer.getClientRects().length > 0;
    const above = shown ? Math.max(0, window.innerHeight - composer.getBoundingClientRect().top) : 0;
    placeToasts(above + TOAST_GAP_PX);
  }

  renderStatus() {
    renderConnection(this.connection.state(), this.status, this.statusAt, Boolean(this.credentials));
  }
}

function distanceToEnd(scroller) {
  return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight;
}

const app = new App();
window.gatewayDashboard = app;
app.start();
