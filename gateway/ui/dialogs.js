// The page's small modal form and its passing notes (toasts).

import { h } from "./dom.js";

const $ = (id) => document.getElementById(id);

/**
 * Ask with the shared modal form. `fields`: [{name, label, value, placeholder, required}].
 * Resolves with {name: trimmed value} on OK, or null when cancelled.
 */
export function prompt({ title, text, fields, ok, danger = false }) {
  const dialog = $("prompt-dialog");
  $("prompt-title").textContent = title;
  $("prompt-text").textContent = text || "";
  const holder = $("prompt-fields");
  holder.replaceChildren(
    ...fields.map((field) =>
      h(
        "label.field",
        h("span", field.label),
        h("input", {
          name: field.name,
          value: field.value || "",
          placeholder: field.placeholder || "",
          required: field.required || false,
          spellcheck: "false",
        }),
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

/**
 * A passing note for a few seconds; `tone`: info | ok | warn | error. A note with a `topic` can be
 * taken back early (`dismissToasts(topic)`: the connection notes once the gateway is back). The
 * same text twice shows once. Notes sit above the message box (`placeToasts`) and never take
 * clicks, so they cover nothing one needs.
 */
export function toast(text, tone = "info", { topic = null } = {}) {
  const box = $("toasts");
  for (const old of [...box.children]) if (old.textContent === text) old.remove();
  const node = h(`div.toast.toast-${tone}`, text);
  if (topic) node.dataset.topic = topic;
  box.append(node);
  setTimeout(() => fade(node), TOAST_MS);
}

const TOAST_MS = 5_000;
const FADE_MS = 600;

function fade(node) {
  if (!node.isConnected) return;
  node.classList.add("leaving");
  node.addEventListener("transitionend", () => node.remove(), { once: true });
  setTimeout(() => node.remove(), FADE_MS); // no transition (reduced motion): gone all the same
}

/** Remove the notes about `topic` at once. */
export function dismissToasts(topic) {
  for (const node of [...$("toasts").children]) if (node.dataset.topic === topic) node.remove();
}

/** Keep the notes `px` pixels above the bottom of the window (just above the message box). */
export function placeToasts(px) {
  $("toasts").style.setProperty("--toast-bottom", `${Math.round(px)}px`);
}
