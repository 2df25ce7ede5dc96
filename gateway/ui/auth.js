// The credential the dashboard signs in with: one entry in localStorage (this origin only), kept
// until the user changes it or the gateway refuses it. A `#token=...` link fragment is taken once
// and removed from the address bar (a fragment is never sent to the server).

import { formatDuration } from "./dom.js";

const CREDENTIALS_KEY = "gateway.dashboard.credentials";

/** `{kind: "token" | "password", secret}` or null when none is stored. */
export function readCredentials() {
  const part = location.hash.replace(/^#/, "").split("/").find((piece) => piece.includes("=")) || "";
  const fromLink = new URLSearchParams(part).get("token");
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

export function saveCredentials(credentials) {
  try {
    localStorage.setItem(CREDENTIALS_KEY, JSON.stringify(credentials));
  } catch {
    // storage disabled: the credential lives as long as the page
  }
}

export function forgetCredentials() {
  try {
    localStorage.removeItem(CREDENTIALS_KEY);
  } catch {
    // nothing stored
  }
}

/** What to tell the user about a refused handshake (`error` from the connection's state). */
export function refusalText(error) {
  if (!error) return "";
  switch (error.detail || "") {
    case "AUTH_TOKEN_MISMATCH":
      return "The gateway refused this token. Check it and try again.";
    case "AUTH_PASSWORD_MISMATCH":
      return "The gateway refused this password.";
    case "AUTH_TOKEN_MISSING":
      return "This gateway needs an access token.";
    case "AUTH_PASSWORD_MISSING":
      return "This gateway uses a password, not a token.";
    case "AUTH_RATE_LIMITED": {
      const wait = error.retryAfterMs ? ` Try again in ${formatDuration(error.retryAfterMs)}.` : "";
      return `Too many refused attempts from this address.${wait}`;
    }
    default:
      return error.message || "The gateway refused the connection.";
  }
}
