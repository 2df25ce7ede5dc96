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

/** A note in the corner for a few seconds; `tone`: info | ok | warn | error. */
export function toast(text, tone = "info") {
  const node = h(`div.toast.toast-${tone}`, text);
  $("toasts").append(node);
  setTimeout(() => node.classList.add("leaving"), 5_000);
  setTimeout(() => node.remove(), 5_600);
}
