// The top bar and the reconnect banner: the link to the gateway and what `status` last said.

import { formatDuration, formatNumber } from "./dom.js";

const $ = (id) => document.getElementById(id);

const LABELS = {
  ready: "Connected",
  reconnecting: "Reconnecting…",
  auth: "Not signed in",
};

/**
 * @param {object} state  the connection's `state()`
 * @param {object | null} status  the last `status` answer (or what hello-ok told)
 * @param {number} statusAt  when it arrived (uptime keeps counting from there)
 * @param {boolean} signedIn  whether a credential is stored
 */
export function renderConnection(state, status, statusAt, signedIn) {
  const connecting = state.phase === "connecting" || state.phase === "handshaking";
  let label = LABELS[state.phase];
  if (connecting) label = state.attempt ? "Reconnecting…" : "Connecting…";
  else if (state.phase === "stopped") {
    label = state.error?.detail === "PROTOCOL_MISMATCH" ? "Incompatible gateway" : "Disconnected";
  } else if (!label) label = signedIn ? "Starting…" : "Not signed in";
  $("link-dot").className = `status-dot status-${connecting ? "connecting" : state.phase}`;
  $("link-text").textContent = label;
  $("gateway-facts").textContent = state.phase === "ready" && status ? facts(status, statusAt) : "";

  const banner = $("banner");
  const showBanner = state.phase === "reconnecting" || (connecting && state.attempt > 0);
  banner.hidden = !showBanner;
  if (showBanner) {
    const wait = Math.max(0, Math.ceil((state.retryAt - Date.now()) / 1000));
    const why = state.shutdown ? "The gateway is restarting" : "Connection lost";
    const next = state.phase === "reconnecting" && wait ? ` next attempt in ${wait} s` : " trying now";
    $("banner-text").textContent = `${why} — reconnecting…${next}. Nothing is lost: the view resumes where it stopped.`;
  }
  document.body.dataset.connection = state.phase;
}

function facts(status, statusAt) {
  const plural = (count, word) => `${formatNumber(count)} ${word}${count === 1 ? "" : "s"}`;
  const parts = [];
  if (status.version) parts.push(`gatewayd ${status.version}`);
  if (status.cluster?.clustered && status.node) parts.push(`node ${status.node} of ${plural(status.cluster.nodes, "node")}`);
  if (typeof status.uptimeMs === "number") parts.push(`up ${formatDuration(status.uptimeMs + (Date.now() - statusAt))}`);
  if (typeof status.connections === "number") parts.push(plural(status.connections, "connection"));
  if (typeof status.runsInFlight === "number") parts.push(`${plural(status.runsInFlight, "run")} active`);
  if (typeof status.sessions?.count === "number") parts.push(plural(status.sessions.count, "session"));
  const sandbox = sandboxFact(status.sandbox);
  if (sandbox) parts.push(sandbox);
  return parts.join(" · ");
}

/** Which runner confines `bash`, as `status` reports it; loud when nothing does. */
export function sandboxFact(sandbox) {
  if (!sandbox || typeof sandbox !== "object") return "";
  if (!sandbox.runner || sandbox.runner === "none") return "sandbox: none, bash refused";
  return sandbox.confined ? `sandbox ${sandbox.runner}` : `sandbox ${sandbox.runner} (NOT CONFINED)`;
}
