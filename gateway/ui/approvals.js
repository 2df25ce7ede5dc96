// Approval cards: a tool call of the shown session that waits for a person's decision, with the
// tool, its arguments or command, the risk and the rule that asked, and the three decisions
// (Approve, Allow for this session, Deny with an optional reason).
//
// The pending requests are read with `exec.approval.list` when the connection is ready and kept
// up to date by the `exec.approval.requested` / `exec.approval.resolved` events (the connection
// holds `operator.admin`, which includes `operator.approvals`). Deciding calls
// `exec.approval.resolve`; the card goes when the `resolved` event arrives (from this dashboard or
// any other surface), and a toast says how it ended. Nothing is kept but the pending requests.

import { toast } from "./dialogs.js";
import { clear, h } from "./dom.js";

const $ = (id) => document.getElementById(id);

export class ApprovalCards {
  /** `request(method, params)` calls the gateway; `onChange()` asks for a render. */
  constructor({ request, onChange }) {
    this.request = request;
    this.onChange = onChange;
    this.pending = new Map();
    this.busy = new Set();
    this._shown = "";
  }

  async onReady() {
    try {
      const answer = await this.request("exec.approval.list", {});
      this.pending = new Map((answer?.approvals || []).map((a) => [a.id, a]));
    } catch (error) {
      toast(`Could not list approval requests: ${error.message}`, "error");
    }
    this.onChange();
  }

  onEvent(name, approval) {
    if (!approval?.id) return;
    if (name === "exec.approval.requested") this.pending.set(approval.id, approval);
    if (name === "exec.approval.resolved") {
      const shown = this.pending.delete(approval.id);
      this.busy.delete(approval.id);
      if (shown) toast(endingText(approval), approval.status === "allowed" ? "info" : "warn");
    }
    this.onChange();
  }

  forSession(sessionId) {
    return [...this.pending.values()].filter((a) => a.sessionId === sessionId);
  }

  /** Show the cards of `sessionId` (re-rendered only when they or their busy state change). */
  render(sessionId) {
    const list = this.forSession(sessionId);
    const stamp = JSON.stringify([sessionId, list.map((a) => a.id), [...this.busy]]);
    if (stamp === this._shown) return;
    this._shown = stamp;
    const box = clear($("approvals"));
    box.hidden = list.length === 0;
    for (const approval of list) box.append(this.card(approval));
  }

  card(approval) {
    const busy = this.busy.has(approval.id);
    const reason = h("input.approval-reason", {
      type: "text",
      placeholder: "Reason (optional, the agent reads it)",
      "aria-label": "Reason for denying",
      maxlength: "2000",
    });
    const decide = (decision) => this.decide(approval, decision, decision === "deny" ? reason.value : "");
    const args = approval.command
      ? h("pre.approval-command", approval.command)
      : h("pre.approval-args", JSON.stringify(approval.args ?? {}, null, 2));
    return h(
      "section.approval-card",
      { dataset: { approvalId: approval.id }, role: "group", "aria-label": `Approval needed: ${approval.tool}` },
      h(
        "header.approval-head",
        h("strong", "Approval needed"),
        h("span.tool-name", approval.tool),
        approval.risk && approval.risk !== "none" ? h(`span.pill.risk-${approval.risk}`, `risk ${approval.risk}`) : null,
      ),
      args,
      h("p.approval-rule.muted", `Asked because ${approval.rule || "the policy asks"}.`),
      h(
        "div.approval-actions",
        h("button.primary.approval-approve", { type: "button", disabled: busy, onclick: () => decide("allow-once") }, "Approve"),
        h(
          "button.approval-session",
          { type: "button", disabled: busy, onclick: () => decide("allow-always"), title: "Approve, and run calls of the same shape in this session without asking" },
          "Allow for this session",
        ),
        reason,
        h("button.danger.approval-deny", { type: "button", disabled: busy, onclick: () => decide("deny") }, "Deny"),
      ),
    );
  }

  async decide(approval, decision, reason) {
    this.busy.add(approval.id);
    this.onChange();
    const params = { id: approval.id, decision };
    if (reason && reason.trim()) params.reason = reason.trim();
    try {
      const answer = await this.request("exec.approval.resolve", params);
      if (answer && !answer.applied) {
        toast(`Already decided: ${endingText(answer.approval)}`, "warn");
        this.pending.delete(approval.id);
      }
    } catch (error) {
      toast(`Could not decide: ${error.message}`, "error");
    } finally {
      this.busy.delete(approval.id);
      this.onChange();
    }
  }
}

function endingText(approval) {
  const what = `${approval.tool}${approval.command ? ` (${approval.command})` : ""}`;
  if (approval.status === "allowed") {
    const scope = approval.decision === "allow-always" ? " for this session" : "";
    return `Allowed${scope} by ${approval.decidedBy} via ${approval.surface}: ${what}`;
  }
  if (approval.status === "denied") {
    return `Denied by ${approval.decidedBy} via ${approval.surface}: ${what}${approval.note ? ` — ${approval.note}` : ""}`;
  }
  return `Approval ${approval.status}: ${what}${approval.note ? ` — ${approval.note}` : ""}`;
}
