// The dashboard's jobs view: every cron job with its schedule, its next and last run and their
// outcome, and buttons to run a job now or switch it on and off.
//
// It reads `cron.list` when opened, again on every `cron` event (a job added, changed, started or
// finished; coalesced to one read per REFRESH_DEBOUNCE_MS) and every REFRESH_EVERY_MS while open
// (the "in 3 min" / "2 min ago" times move on). Changing a job needs `operator.admin`; a refusal
// shows as a toast. Nothing is kept between openings but the last list.

import { toast } from "./dialogs.js";
import { clear, h } from "./dom.js";

const REFRESH_DEBOUNCE_MS = 300;
const REFRESH_EVERY_MS = 10_000;

const $ = (id) => document.getElementById(id);

export class AutomationPanel {
  /** `request(method, params)` calls the gateway; `connected()` says whether it can now. */
  constructor({ request, connected }) {
    this.request = request;
    this.connected = connected;
    this.jobs = [];
    this.loaded = false;
    this.error = null;
    this._soon = 0;
    this._every = 0;
    $("automation-toggle").addEventListener("click", () => (this.isOpen() ? this.close() : this.open()));
    $("automation-close").addEventListener("click", () => this.close());
    $("automation-refresh").addEventListener("click", () => this.refresh());
  }

  isOpen() {
    return document.body.classList.contains("automation-open");
  }

  open() {
    document.body.classList.add("automation-open");
    $("automation").hidden = false;
    $("automation-toggle").setAttribute("aria-expanded", "true");
    clearInterval(this._every);
    this._every = setInterval(() => this.refresh(), REFRESH_EVERY_MS);
    this.render();
    this.refresh();
  }

  close() {
    document.body.classList.remove("automation-open");
    $("automation").hidden = true;
    $("automation-toggle").setAttribute("aria-expanded", "false");
    clearInterval(this._every);
  }

  /** A `cron` event: read the list again soon, if it is shown. */
  onEvent() {
    if (!this.isOpen() || this._soon) return;
    this._soon = setTimeout(() => {
      this._soon = 0;
      this.refresh();
    }, REFRESH_DEBOUNCE_MS);
  }

  /** The connection is (back) up. */
  onReady() {
    if (this.isOpen()) this.refresh();
  }

  async refresh() {
    if (!this.connected()) return;
    try {
      const answer = await this.request("cron.list", { includeDisabled: true, limit: 200 });
      this.jobs = answer.jobs || [];
      this.error = null;
    } catch (error) {
      this.error = error.message;
    }
    this.loaded = true;
    this.render();
  }

  async act(job, method, params, done) {
    try {
      await this.request(method, params);
      toast(done, "ok");
    } catch (error) {
      toast(`Could not change ${job.name}: ${error.message}`, "error");
    }
    this.refresh();
  }

  render() {
    const body = clear($("automation-body"));
    const enabled = this.jobs.filter((job) => job.enabled).length;
    $("automation-summary").textContent = this.loaded
      ? `${this.jobs.length} job${this.jobs.length === 1 ? "" : "s"}, ${enabled} enabled`
      : "";
    if (this.error) {
      body.append(h("p.error", `Could not list the jobs: ${this.error}`));
      return;
    }
    if (!this.loaded) {
      body.append(h("p.muted", "Loading…"));
      return;
    }
    if (!this.jobs.length) {
      body.append(
        h("p.muted.automation-empty", "No scheduled jobs yet. Add one with ", h("code", "gatewayctl cron add"), "."),
      );
      return;
    }
    const rows = this.jobs.map((job) => this.row(job));
    body.append(
      h(
        "table.jobs",
        h("thead", h("tr", ["Job", "Schedule", "Next run", "Last run", "Outcome", ""].map((name) => h("th", name)))),
        h("tbody", rows),
      ),
    );
  }

  row(job) {
    const state = job.state || {};
    const toggle = job.enabled
      ? h("button.small", {
          type: "button",
          onclick: () => this.act(job, "cron.update", { id: job.id, patch: { enabled: false } }, `${job.name} is off`),
        }, "Disable")
      : h("button.small", {
          type: "button",
          onclick: () => this.act(job, "cron.update", { id: job.id, patch: { enabled: true } }, `${job.name} is on`),
        }, "Enable");
    const run = h(
      "button.small",
      { type: "button", onclick: () => this.act(job, "cron.run", { id: job.id }, `${job.name} started`) },
      "Run now",
    );
    return h(
      "tr.job",
      { dataset: { jobId: job.id, enabled: String(Boolean(job.enabled)) } },
      h("td.job-name", h("strong", job.name), job.description ? h("div.muted", job.description) : null),
      h("td", scheduleText(job.schedule || {})),
      h("td.job-next", job.enabled ? when(state.nextRunAtMs) : "off"),
      h("td.job-last", when(state.lastRunAtMs)),
      h("td.job-outcome", outcome(state)),
      h("td.job-actions", run, toggle),
    );
  }
}

function outcome(state) {
  if (state.runningAtMs !== undefined) return h("span.pill.pill-running", "running");
  if (!state.lastRunStatus) return h("span.muted", "never ran");
  const parts = [h(`span.pill.pill-${state.lastRunStatus === "ok" ? "ok" : "error"}`, state.lastRunStatus)];
  const delivery = state.lastDeliveryStatus;
  if (delivery && delivery !== "not-requested") {
    parts.push(h("span.muted", { title: state.lastDeliveryError || null }, ` ${delivery}`));
  }
  if (state.lastError) parts.push(h("div.muted.job-error", state.lastError));
  return parts;
}

export function scheduleText(schedule) {
  if (schedule.kind === "cron") return `cron ${schedule.expr} (${schedule.tz || "UTC"})`;
  if (schedule.kind === "every") return `every ${span(schedule.everyMs)}`;
  if (schedule.kind === "at") return `once at ${new Date(schedule.at).toLocaleString()}`;
  return String(schedule.kind || "?");
}

function when(ms) {
  if (typeof ms !== "number") return "—";
  const delta = ms - Date.now();
  return delta >= 0 ? `in ${span(delta)}` : `${span(-delta)} ago`;
}

function span(ms) {
  const seconds = Math.round(ms / 1000);
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
  if (seconds < 86_400) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86_400)} d`;
}
