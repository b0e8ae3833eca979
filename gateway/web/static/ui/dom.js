// Small DOM helpers shared by the page's modules. Text is always set as text
// (`append` of a string makes a text node), never parsed as markup.

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// An epoch-ms time as the page shows every time: UTC, to the second.
export function when(ms) {
  if (!Number.isFinite(ms)) return "";
  return `${new Date(ms).toISOString().replace("T", " ").slice(0, 19)}Z`;
}

export function message(error) {
  return error instanceof Error ? error.message : String(error);
}

// A session's label: its title (SPEC §14) when it has one, else its id; with a
// title, the id goes beside it, smaller.
export function sessionLabel(session) {
  const title = session.title?.title;
  if (!title) return h("span", { class: "label" }, h("span", { class: "sid" }, session.id));
  return h(
    "span",
    { class: "label titled", "data-title": title, "data-title-source": session.title.sourceKind },
    h("span", { class: "title" }, title),
    " ",
    h("small", { class: "sid" }, session.id),
  );
}

// Put `text` on the clipboard: the Clipboard API where the page may use it, else a
// selected hidden field and the copy command. Rejects when neither works.
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return;
  } catch {
    // not a secure context, or no permission: the older way below
  }
  const field = h("textarea", { class: "copy-buffer", readonly: true, "aria-hidden": "true" });
  field.value = text;
  document.body.append(field);
  try {
    field.select();
    if (!document.execCommand("copy")) throw new Error("copy refused");
  } finally {
    field.remove();
  }
}

// ArrowUp/ArrowDown move the focus between the `selector` buttons of `list`.
export function arrowKeys(list, selector) {
  list.addEventListener("keydown", (event) => {
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
    const buttons = [...list.querySelectorAll(selector)];
    const at = buttons.indexOf(document.activeElement);
    const next = buttons[Math.min(buttons.length - 1, Math.max(0, at + (event.key === "ArrowDown" ? 1 : -1)))];
    if (next) {
      event.preventDefault();
      next.focus();
    }
  });
}
