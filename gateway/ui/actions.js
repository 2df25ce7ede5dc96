// What a person does to the selected session from the header and the sidebar: stop, branch,
// point a key at it, compact, reset, and create a new session. Each action calls the gateway
// and reports the outcome as a toast; the page re-renders from the directory it updates.

import { ConnectionLost } from "./connection.js";
import { prompt, toast } from "./dialogs.js";
import { formatTokens } from "./dom.js";
import { displayName } from "./sessions.js";

const $ = (id) => document.getElementById(id);

export class SessionActions {
  /**
   * @param {object} app
   * @param {(method: string, params: object) => Promise<any>} app.request  a gateway call
   * @param {import("./sessions.js").SessionDirectory} app.directory  the session rows
   * @param {() => object | null} app.currentRow  the selected session's row
   * @param {(sessionId: string) => void} app.select  select another session
   * @param {() => void} app.schedule  re-render soon
   */
  constructor({ request, directory, currentRow, select, schedule }) {
    this.request = request;
    this.directory = directory;
    this.currentRow = currentRow;
    this.select = select;
    this.schedule = schedule;
  }

  async call(method, params, what) {
    try {
      return await this.request(method, params);
    } catch (error) {
      const lost = error instanceof ConnectionLost;
      const reason = lost ? "not connected to the gateway" : error.message;
      toast(`${what}: ${reason}`, "error", { topic: lost ? "connection" : null });
      return null;
    }
  }

  async abort() {
    const row = this.currentRow();
    if (!row) return;
    const answer = await this.call("chat.abort", { sessionKey: row.key || row.sessionId, sessionId: row.sessionId }, "Could not stop the run");
    if (answer && !answer.aborted) toast("Nothing was running.", "info");
  }

  async branch(entryId) {
    const row = this.currentRow();
    if (!row) return;
    const params = { sessionId: row.sessionId };
    if (entryId) params.fromEntryId = entryId;
    const answer = await this.call("sessions.branch", params, "Could not branch");
    if (!answer?.session) return;
    this.directory.upsert(answer.session);
    toast(`New branch ${displayName(answer.session)}`, "ok");
    this.select(answer.session.sessionId);
  }

  async switchKey() {
    const row = this.currentRow();
    if (!row) return;
    const root = this.directory.rootOf(row.sessionId);
    const suggestion = root && root.sessionId !== row.sessionId && root.key ? root.key : row.key || "";
    const values = await prompt({
      title: "Point a key at this session",
      text: "Messages sent to the key (from the dashboard, gatewayctl or a channel) will go to this session from now on. The session the key pointed at stays as it is.",
      fields: [{ name: "key", label: "Session key", value: suggestion, required: true }],
      ok: "Switch",
    });
    if (!values) return;
    const answer = await this.call("sessions.switch", { key: values.key, sessionId: row.sessionId }, "Could not switch the key");
    if (!answer?.session) return;
    this.directory.upsert(answer.session);
    toast(`${values.key} now points at this session`, "ok");
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
    toast(`Compacted${saved}`, "ok");
  }

  async reset() {
    const row = this.currentRow();
    if (!row?.key) {
      toast("Only a session that has a key can be reset.", "warn");
      return;
    }
    const values = await prompt({
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
    const values = await prompt({
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
}
