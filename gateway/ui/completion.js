// Slash-command completion in the composer. While the message is a single `/word` (nothing after
// it yet), a list under the box shows the commands the gateway offers for the session's agent
// (`commands.list`: chat commands, prompt templates, skills as `skill:<name>`, extensions'
// commands) whose name starts with what is typed. Arrow keys move through it, Tab or Enter puts
// the chosen command in the box (followed by a space when it takes arguments), Escape or a click
// elsewhere closes it. Enter sends when the list is closed, or when the box holds the chosen
// command exactly already.
//
// The list is fetched once each time it opens (the gateway rescans skills and templates, so a new
// one shows the next time), and an answer that arrives after the text moved on is dropped.

const MAX_SHOWN = 12;

/** The part after the slash while the message is one `/word` and nothing else; else null. */
export function slashQuery(text) {
  const match = /^\/(\S*)$/.exec(text);
  return match ? match[1] : null;
}

/** The commands whose name starts with `query` (any case), in the order the gateway gave. */
export function matching(commands, query) {
  const wanted = query.toLowerCase();
  return commands.filter((command) => String(command.name).toLowerCase().startsWith(wanted)).slice(0, MAX_SHOWN);
}

export class CommandCompletion {
  /**
   * @param {HTMLTextAreaElement} input  the composer's text box
   * @param {() => Promise<{commands: object[]}>} load  `commands.list` for the current session
   */
  constructor(input, load) {
    this.input = input;
    this.load = load;
    this.commands = null;
    this.shown = [];
    this.active = 0;
    this.generation = 0;
    this.list = document.createElement("ul");
    this.list.id = "command-completions";
    this.list.className = "completions";
    this.list.setAttribute("role", "listbox");
    this.list.setAttribute("aria-label", "Commands");
    this.list.hidden = true;
    input.insertAdjacentElement("beforebegin", this.list);
    input.setAttribute("aria-autocomplete", "list");
    input.setAttribute("aria-controls", this.list.id);
    input.setAttribute("aria-expanded", "false");
    input.addEventListener("input", () => this.update());
    // Capture: the list handles its keys before the composer's own Enter-to-send.
    input.addEventListener("keydown", (event) => this.onKey(event), true);
    input.addEventListener("blur", () => setTimeout(() => this.close(), 150));
    this.list.addEventListener("mousedown", (event) => {
      const item = event.target.closest("li[data-index]");
      if (!item) return;
      event.preventDefault();
      this.choose(Number(item.dataset.index));
    });
  }

  get open() {
    return !this.list.hidden;
  }

  update() {
    const query = slashQuery(this.input.value);
    if (query === null) {
      this.close();
      return;
    }
    if (this.commands === null) {
      this.fetch();
      return;
    }
    this.render(matching(this.commands, query));
  }

  fetch() {
    const generation = ++this.generation;
    this.load()
      .then((answer) => {
        if (generation !== this.generation) return;
        this.commands = Array.isArray(answer?.commands) ? answer.commands : [];
        this.update();
      })
      .catch(() => {
        // Not connected, or refused: no completion this time; typing works as always.
        if (generation === this.generation) this.close();
      });
  }

  render(commands) {
    this.shown = commands;
    this.active = Math.min(this.active, Math.max(0, commands.length - 1));
    this.list.replaceChildren(
      ...commands.map((command, index) => {
        const item = document.createElement("li");
        item.dataset.index = String(index);
        item.dataset.name = command.name;
        item.setAttribute("role", "option");
        item.setAttribute("aria-selected", String(index === this.active));
        const name = document.createElement("span");
        name.className = "completion-name";
        name.textContent = `/${command.name}`;
        const description = document.createElement("span");
        description.className = "completion-description";
        description.textContent = command.description || "";
        item.append(name, description);
        return item;
      }),
    );
    const visible = commands.length > 0;
    this.list.hidden = !visible;
    this.input.setAttribute("aria-expanded", String(visible));
  }

  close() {
    this.generation++;
    this.commands = null;
    this.shown = [];
    this.active = 0;
    this.list.hidden = true;
    this.list.replaceChildren();
    this.input.setAttribute("aria-expanded", "false");
  }

  move(step) {
    if (!this.shown.length) return;
    this.active = (this.active + step + this.shown.length) % this.shown.length;
    this.render(this.shown);
  }

  choose(index) {
    const command = this.shown[index];
    if (!command) return;
    this.input.value = `/${command.name}${command.acceptsArgs ? " " : ""}`;
    this.close();
    this.input.focus();
    this.input.setSelectionRange(this.input.value.length, this.input.value.length);
  }

  onKey(event) {
    if (!this.open || event.isComposing) return;
    const active = this.shown[this.active];
    if (event.key === "Enter" && !event.shiftKey && active && this.input.value === `/${active.name}`) {
      // The command is typed out already: Enter sends it as always.
      this.close();
      return;
    }
    const keys = {
      ArrowDown: () => this.move(1),
      ArrowUp: () => this.move(-1),
      Tab: () => this.choose(this.active),
      Enter: () => this.choose(this.active),
      Escape: () => this.close(),
    };
    const act = event.shiftKey && event.key !== "Tab" ? null : keys[event.key];
    if (!act) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    act();
  }
}
