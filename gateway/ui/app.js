// The dashboard: wires the connection, the session directory, the live feed of the selected
// session and the page. State lives in the models (SessionDirectory, Transcript, Outbox); the
// page is re-rendered from them (batched to one pass per animation frame).
//
// `window.gatewayDashboard` is this App, for poking at the state from the browser console.

import { ConnectionLost, GatewayConnection } from "./connection.js";
import { formatCost, formatDuration, formatNumber, formatTokens, h } from "./dom.js";
import { SessionFeed } from "./feed.js";
import { Outbox } from "./outbox.js";
import { renderTranscript, resetTranscriptView } from "./render.js";
import { SessionDirectory, displayName, displayStatus } from "./sessions.js";
import { renderTree } from "./tree.js";

const DASHBOARD_VERSION = "0.1.0";
const CREDENTIALS_KEY = "gateway.dashboard.credentials";
const STATUS_EVERY_MS = 5_000;
const LIST_PAGE = 200;
const LIST_MAX = 2_000;

const $ = (id) => document.getElementById(id);

// --- credentials (localStorage: one entry, this origin only) --------------------------------------

function readCredentials() {
  const fragment = new URLSearchParams(location.hash.replace(/^#/, "").split("/").find((part) => part.includes("=")) || "");
  const fromLink = fragment.get("token");
  if (fromLink) {
    saveCredentials({ kind: "token", secret: fromLink });
    history.replaceState(null, "", location.pathname + location.search);
  }
  try {
    const stored = JSON.parse(localStorage.getItem(CREDENTIALS_KEY) || "null");
    if (stored && typeof stored.secret === "string" && stored.secret) return stored;
  } catch {
    // unreadable: ask again
  }
  return null;
}

function saveCredentials(credentials) {
  try {
    localStorage.setItem(CREDENTIALS_KEY, JSON.stringify(credentials));
  } catch {
    // storage disabled: the credential lives as long as the page
  }
}

function forgetCredentials() {
  try {
    localStorage.removeItem(CREDENTIALS_KEY);
  } catch {
    // nothing stored
  }
}

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
    this.openDetails = new Set();
    this.status = null;
    this.statusAt = 0;
    this._statusTimer = null;
    this._frame = 0;
    this._fallback = 0;
    this._treeVersion = -1;
    this._listRefresh = null;
    this._stickToBottom = true;
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
    this.status = { version: hello?.server?.version, uptimeMs: hello?.snapshot?.uptimeMs };
    this.statusAt = Date.now();
    this.renderStatus();
    this.outbox.flush(this.connection);
    clearInterval(this._statusTimer);
    this._statusTimer = setInterval(() => this.refreshStatus(), STATUS_EVERY_MS);
    this.refreshStatus();
    try {
      const subscribed = await this.connection.request("sessions.subscribe", {});
      await this.loadList(subscribed?.list);
    } catch (error) {
      if (!(error instanceof ConnectionLost)) this.toast(`Could not list sessions: ${error.message}`, "error");
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

  async loadList(first) {
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
    this.directory.replaceAll(rows);
  }

  async loadTree(sessionId) {
    try {
      const answer = await this.connection.request("sessions.tree", { sessionId });
      this.directory.addTree(answer.root);
      this.schedule();
    } catch (error) {
      if (error?.code === "NOT_FOUND" && sessionId === this.selected) {
        this.toast("That session no longer exists.", "error");
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
    if (name === "shutdown") {
      this.toast(`The gateway is stopping (${payload.reason || "shutdown"}); the dashboard reconnects when it is back.`, "warn");
    }
  }

  // --- credentials ------------------------------------------------------------------------------

  askForCredentials(error) {
    const dialog = $("auth-dialog");
    const message = $("auth-error");
    const detail = error?.detail || "";
    let text = "";
    if (detail === "AUTH_TOKEN_MISMATCH") text = "The gateway refused this token. Check it and try again.";
    else if (detail === "AUTH_PASSWORD_MISMATCH") text = "The gateway refused this password.";
    else if (detail === "AUTH_TOKEN_MISSING") text = "This gateway needs an access token.";
    else if (detail === "AUTH_PASSWORD_MISSING") text = "This gateway uses a password, not a token.";
    else if (detail === "AUTH_RATE_LIMITED") {
      const wait = error?.retryAfterMs ? ` Try again in ${formatDuration(error.retryAfterMs)}.` : "";
      text = `Too many refused attempts from this address.${wait}`;
    } else if (error) text = error.message || "The gateway refused the connection.";
    message.textContent = text;
    message.hidden = !text;
    const usePassword = detail.startsWith("AUTH_PASSWORD") || this.credentials?.kind === "password";
    $("auth-use-password").checked = usePassword;
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
      onError: (error, what) => this.toast(`Live view (${what}): ${error.message}`, "error"),
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

  async call(method, params, what) {
    try {
      return await this.connection.request(method, params);
    } catch (error) {
      const reason = error instanceof ConnectionLost ? "not connected to the gateway" : error.message;
      this.toast(`${what}: ${reason}`, "error");
      return null;
    }
  }

  send(event) {
    event?.preventDefault();
    const input = $("composer-input");
    const text = input.value;
    const row = this.currentRow();
    if (!text.trim() || !row) return;
    if (!row.key) {
      this.toast("This session has no key to send to. Point a key at it with “Switch key…”.", "warn");
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

  async abort() {
    const row = this.currentRow();
    if (!row) return;
    const answer = await this.call("chat.abort", { sessionKey: row.key || row.sessionId, sessionId: row.sessionId }, "Could not stop the run");
    if (answer && !answer.aborted) this.toast("Nothing was running.", "info");
  }

  async branch(entryId) {
    const row = this.currentRow();
    if (!row) return;
    const params = { sessionId: row.sessionId };
    if (entryId) params.fromEntryId = entryId;
    const answer = await this.call("sessions.branch", params, "Could not branch");
    if (!answer?.session) return;
    this.directory.upsert(answer.session);
    this.toast(`New branch ${displayName(answer.session)}`, "ok");
    this.select(answer.session.sessionId);
  }

  async switchKey() {
    const row = this.currentRow();
    if (!row) return;
    const root = this.directory.rootOf(row.sessionId);
    const suggestion = root && root.sessionId !== row.sessionId && root.key ? root.key : row.key || "";
    const values = await this.prompt({
      title: "Point a key at this session",
      text: "Messages sent to the key (from the dashboard, gatewayctl or a channel) will go to this session from now on. The session the key pointed at stays as it is.",
      fields: [{ name: "key", label: "Session key", value: suggestion, required: true }],
      ok: "Switch",
    });
    if (!values) return;
    const answer = await this.call("sessions.switch", { key: values.key, sessionId: row.sessionId }, "Could not switch the key");
    if (!answer?.session) return;
    this.directory.upsert(answer.session);
    this.toast(`${values.key} now points at this session`, "ok");
    this.schedule();
  }

  async compact() {
    const row = this.currentRow();
    if (!row) return;
    const answer = await this.call("sessions.compact", { key: row.key || row.sessionId, sessionId: row.sessionId }, "Could not compact");
    if (!answer) return;
    const saved =
      typeof answer.tokensBefore === "number" && typeof answer.tokensAfter === "number"
        ? ` (${formatTokens(answer.tokensBefore)} → ${formatTokens(answer.tokensAfter)} tokens)`
        : "";
    this.toast(`Compacted${saved}`, "ok");
  }

  async reset() {
    const row = this.currentRow();
    if (!row?.key) {
      this.toast("Only a session that has a key can be reset.", "warn");
      return;
    }
    const values = await this.prompt({
      title: "Reset this session?",
      text: `${row.key} will point at a new, empty session. The current one is kept and stays in the tree.`,
      fields: [],
      ok: "Reset",
      danger: true,
    });
    if (!values) return;
    const answer = await this.call("sessions.reset", { key: row.key }, "Could not reset");
    if (!answer?.session) return;
    this.directory.upsert(answer.session);
    this.select(answer.session.sessionId);
  }

  async newSession() {
    const values = await this.prompt({
      title: "New session",
      text: "Leave the key empty to get a fresh one.",
      fields: [
        { name: "key", label: "Session key (optional)", value: "", placeholder: "agent:main:session:…" },
        { name: "label", label: "Label (optional)", value: "" },
      ],
      ok: "Create",
    });
    if (!values) return;
    const params = {};
    if (values.key) params.key = values.key;
    if (values.label) params.label = values.label;
    const answer = await this.call("sessions.create", params, "Could not create the session");
    if (!answer?.session) return;
    this.directory.upsert(answer.session);
    this.select(answer.session.sessionId);
    $("composer-input").focus();
  }

  /** A small modal form; resolves with the field values, or null when cancelled. */
  prompt({ title, text, fields, ok, danger = false }) {
    const dialog = $("prompt-dialog");
    $("prompt-title").textContent = title;
    $("prompt-text").textContent = text || "";
    const holder = $("prompt-fields");
    holder.replaceChildren(
      ...fields.map((field) =>
        h(
          "label.field",
          h("span", field.label),
          h("input", { name: field.name, value: field.value || "", placeholder: field.placeholder || "", required: field.required || false, spellcheck: "false" }),
        ),
      ),
    );
    const okButton = $("prompt-ok");
    okButton.textContent = ok;
    okButton.className = danger ? "danger" : "primary";
    return new Promise((resolve) => {
      const done = (value) => {
        dialog.removeEventListener("close", onClose);
        $("prompt-form").removeEventListener("submit", onSubmit);
        $("prompt-cancel").removeEventListener("click", onCancel);
        if (dialog.open) dialog.close();
        resolve(value);
      };
      const onSubmit = (event) => {
        event.preventDefault();
        const values = {};
        for (const input of holder.querySelectorAll("input")) values[input.name] = input.value.trim();
        done(values);
      };
      const onCancel = () => done(null);
      const onClose = () => done(null);
      $("prompt-form").addEventListener("submit", onSubmit);
      $("prompt-cancel").addEventListener("click", onCancel);
      dialog.addEventListener("close", onClose);
      dialog.showModal();
      (holder.querySelector("input") || okButton).focus();
    });
  }

  toast(text, tone = "info") {
    const node = h(`div.toast.toast-${tone}`, text);
    $("toasts").append(node);
    setTimeout(() => node.classList.add("leaving"), 5_000);
    setTimeout(() => node.remove(), 5_600);
  }

  // --- page ---------------------------------------------------------------------------------------

  bindPage() {
    $("auth-form").addEventListener("submit", (event) => this.submitCredentials(event));
    $("auth-use-password").addEventListener("change", () => this.updateAuthLabels());
    $("auth-dialog").addEventListener("cancel", (event) => event.preventDefault());
    $("sign-out").addEventListener("click", () => this.signOut());
    $("banner-retry").addEventListener("click", () => this.connection.retryNow());
    $("new-session").addEventListener("click", () => this.newSession());
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
    $("composer-input").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) this.send(event);
    });
    $("abort").addEventListener("click", () => this.abort());
    $("action-branch").addEventListener("click", () => this.branch(null));
    $("action-switch").addEventListener("click", () => this.switchKey());
    $("action-compact").addEventListener("click", () => this.compact());
    $("action-reset").addEventListener("click", () => this.reset());
    $("load-older-button").addEventListener("click", () => {
      this._stickToBottom = false;
      this.feed?.loadOlder().catch((error) => this.toast(`Could not load earlier messages: ${error.message}`, "error"));
    });
    const scroller = $("transcript-scroll");
    scroller.addEventListener("scroll", () => {
      this._stickToBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
      $("jump").hidden = this._stickToBottom;
    });
    $("jump").addEventListener("click", () => {
      this._stickToBottom = true;
      scroller.scrollTop = scroller.scrollHeight;
      $("jump").hidden = true;
    });
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
    if (!feed) return;
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
      openDetails: this.openDetails,
      actions: {
        branch: (entryId) => this.branch(entryId),
        retry: (item) => this.outbox.retry(this.connection, item),
        dismiss: (item) => this.outbox.remove(item),
      },
    });
    if (stick) scroller.scrollTop = scroller.scrollHeight;
  }

  renderStatus() {
    const state = this.connection.state();
    const dot = $("link-dot");
    const text = $("link-text");
    const facts = $("gateway-facts");
    const banner = $("banner");
    let label = "";
    let tone = state.phase;
    switch (state.phase) {
      case "ready":
        label = "Connected";
        break;
      case "connecting":
      case "handshaking":
        label = state.attempt ? "Reconnecting…" : "Connecting…";
        tone = "connecting";
        break;
      case "reconnecting":
        label = "Reconnecting…";
        break;
      case "auth":
        label = "Not signed in";
        break;
      case "stopped":
        label = state.error?.detail === "PROTOCOL_MISMATCH" ? "Incompatible gateway" : "Disconnected";
        break;
      default:
        label = this.credentials ? "Starting…" : "Not signed in";
    }
    dot.className = `status-dot status-${tone}`;
    text.textContent = label;
    if (state.phase === "ready" && this.status) {
      const s = this.status;
      const uptime = typeof s.uptimeMs === "number" ? s.uptimeMs + (Date.now() - this.statusAt) : null;
      const parts = [];
      if (s.version) parts.push(`gatewayd ${s.version}`);
      if (uptime !== null) parts.push(`up ${formatDuration(uptime)}`);
      if (typeof s.connections === "number") parts.push(`${formatNumber(s.connections)} connection${s.connections === 1 ? "" : "s"}`);
      if (typeof s.runsInFlight === "number") parts.push(`${formatNumber(s.runsInFlight)} run${s.runsInFlight === 1 ? "" : "s"} active`);
      if (s.sessions && typeof s.sessions.count === "number") parts.push(`${formatNumber(s.sessions.count)} sessions`);
      facts.textContent = parts.join(" · ");
    } else {
      facts.textContent = "";
    }
    const showBanner = state.phase === "reconnecting" || ((state.phase === "connecting" || state.phase === "handshaking") && state.attempt > 0);
    banner.hidden = !showBanner;
    if (showBanner) {
      const wait = Math.max(0, Math.ceil((state.retryAt - Date.now()) / 1000));
      const why = state.shutdown ? "The gateway is restarting" : "Connection lost";
      const next = state.phase === "reconnecting" ? (wait ? ` next attempt in ${wait} s` : " trying now") : " trying now";
      $("banner-text").textContent = `${why} — reconnecting…${next}. Nothing is lost: the view resumes where it stopped.`;
    }
    document.body.dataset.connection = state.phase;
  }
}

const app = new App();
window.gatewayDashboard = app;
app.start();
