// The lineage panel: traceSession.graph as a DAG laid out by dagre, drawn in SVG.
//
// A lineage is a forest (one parent per session), so the page fixes the order
// itself: a preorder walk with siblings by createdAt then id, handed to dagre as
// its node order (`customOrder`), with ranks by depth (`topDownRanks`). That
// keeps the drawing deterministic and skips dagre's crossing-minimisation
// sweeps, which a preorder tree does not need and which dominate its time at
// 1,000 nodes. An incomplete chain (a parent missing
// from the corpus, or outside the token's scope) gets a dashed ghost node.
// A session with a title (SPEC §14) is labelled by it, its id below, smaller;
// titles are set as text after the markup is parsed, never written into it. Labels
// wrap (each node is as wide and tall as its label needs), so nothing is cut; the pane
// pans and zooms (`LineageZoom`).

const SVG = "http://www.w3.org/2000/svg";
const PAD_X = 8;
const PAD_Y = 6;
const MIN_W = 120;
const MAX_TEXT_W = 200; // a longer label wraps onto more lines: it is never cut
const FONTS = {
  plain: { weight: 400, size: 12, line: 15 },
  title: { weight: 600, size: 12, line: 15 },
  id: { weight: 400, size: 10, line: 13 },
};

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

function bySiblingOrder(a, b) {
  const ta = a.header?.createdAt ?? 0;
  const tb = b.header?.createdAt ?? 0;
  if (ta !== tb) return ta - tb;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

// Nodes in preorder (roots first), each {key, session|null, ghostId|null}, and edges.
export function lineageModel(trace) {
  const sessions = trace.graph.nodes;
  const byId = new Map(sessions.map((s) => [s.id, s]));
  const children = new Map();
  const edges = trace.graph.edges.map((e) => ({ parentId: e.parentId, childId: e.childId }));
  const ghostId = trace.complete ? null : trace.unresolvedParentId;
  if (ghostId && !byId.has(ghostId)) {
    for (const s of sessions) {
      if (s.header?.parentSessionId === ghostId) edges.push({ parentId: ghostId, childId: s.id, ghost: true });
    }
  }
  const hasParent = new Set();
  for (const e of edges) {
    if (!children.has(e.parentId)) children.set(e.parentId, []);
    children.get(e.parentId).push(e.childId);
    hasParent.add(e.childId);
  }
  const info = (id) => byId.get(id) ?? { id, header: { createdAt: 0 } };
  for (const list of children.values()) list.sort((a, b) => bySiblingOrder(info(a), info(b)));
  const roots = [...(ghostId ? [ghostId] : []), ...sessions.map((s) => s.id)]
    .filter((id, i, all) => !hasParent.has(id) && all.indexOf(id) === i)
    .sort((a, b) => (a === ghostId ? -1 : b === ghostId ? 1 : bySiblingOrder(info(a), info(b))));
  const order = [];
  const seen = new Set();
  for (const root of roots) {
    const stack = [root];
    while (stack.length) {
      const id = stack.pop();
      if (seen.has(id)) continue;
      seen.add(id);
      order.push(id);
      const kids = children.get(id) ?? [];
      for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
    }
  }
  const nodes = order.map((id, i) => ({
    key: `n${i}`,
    id,
    session: byId.get(id) ?? null,
    ghost: id === ghostId && !byId.has(id),
  }));
  return { nodes, edges, ghostId };
}

// Ranks top-down: a root at 0, each child one step (its edge's minlen) past its
// parent. dagre's own "longest-path" ranker pushes every leaf to the last rank,
// and its network-simplex ranker costs most of a second at 1,000 nodes.
function topDownRanks(g) {
  const waiting = new Map();
  const ready = [];
  for (const v of g.nodes()) {
    const n = g.inEdges(v).length;
    waiting.set(v, n);
    if (!n) {
      g.node(v).rank = 0;
      ready.push(v);
    }
  }
  while (ready.length) {
    const v = ready.pop();
    const base = g.node(v).rank;
    for (const e of g.outEdges(v)) {
      const w = g.node(e.w);
      const r = base + g.edge(e).minlen;
      if (w.rank === undefined || r > w.rank) w.rank = r;
      const left = waiting.get(e.w) - 1;
      waiting.set(e.w, left);
      if (!left) ready.push(e.w);
    }
  }
}

// dagre's node order for each rank: a depth-first walk in insertion order. On a
// tree inserted in preorder this is already crossing-free.
function preorderRanks(g) {
  const layers = [];
  const seen = new Set();
  for (const start of g.nodes()) {
    if (g.predecessors(start).length) continue;
    const stack = [start];
    while (stack.length) {
      const v = stack.pop();
      if (seen.has(v)) continue;
      seen.add(v);
      const node = g.node(v);
      const layer = layers[node.rank] ?? (layers[node.rank] = []);
      node.order = layer.length;
      layer.push(v);
      const next = g.successors(v);
      for (let i = next.length - 1; i >= 0; i--) stack.push(next[i]);
    }
  }
}

// Text widths as the page's own font draws them (a canvas measures without layout).
// Bold, as the shown session's node is drawn (.node.target text): any node may be it.
let measurer = null;
let measuredFamily = null;
let measuredSize = 0;
function textWidth(text, font) {
  if (!measurer) {
    measurer = document.createElement("canvas").getContext("2d");
    measuredFamily = getComputedStyle(document.documentElement).fontFamily || "sans-serif";
  }
  if (measuredSize !== font.size) {
    measurer.font = `700 ${font.size}px ${measuredFamily}`;
    measuredSize = font.size;
  }
  return measurer.measureText(text).width + 1; // a pixel of slack against rounding
}

// `text` as lines no wider than `max`: broken after a separator (- _ / . : space) where
// one fits, else between characters (never inside one outside the BMP). Nothing is cut.
export function wrapText(text, font, max = MAX_TEXT_W) {
  if (textWidth(String(text), font) <= max) return [String(text)]; // the usual case
  const pieces = String(text).match(/[^-_/.: ]*[-_/.: ]+|[^-_/.: ]+$/gu) ?? [String(text)];
  const lines = [];
  let line = "";
  const push = (piece) => {
    if (textWidth(line + piece, font) <= max) {
      line += piece;
      return;
    }
    if (line) lines.push(line);
    line = "";
    if (textWidth(piece, font) <= max) {
      line = piece;
      return;
    }
    for (const ch of Array.from(piece)) {
      if (line && textWidth(line + ch, font) > max) {
        lines.push(line);
        line = "";
      }
      line += ch;
    }
  };
  for (const piece of pieces) push(piece);
  if (line || !lines.length) lines.push(line);
  return lines;
}

// A node's lines ({text, font}) and its box: a title (bold) over its id (smaller), or
// the id alone; each wrapped, so the whole of both is shown.
function nodeLabel(n) {
  const title = n.session?.title?.title;
  const lines = [];
  if (title) {
    for (const text of wrapText(title, FONTS.title)) lines.push({ text, font: FONTS.title, kind: "title" });
    for (const text of wrapText(n.id, FONTS.id)) lines.push({ text, font: FONTS.id, kind: "id" });
  } else {
    const label = n.ghost ? `? ${n.id}` : n.id;
    for (const text of wrapText(label, FONTS.plain)) lines.push({ text, font: FONTS.plain, kind: "plain" });
  }
  const widest = Math.max(...lines.map((l) => textWidth(l.text, l.font)));
  const width = Math.ceil(Math.max(MIN_W, widest + 2 * PAD_X + (n.session?.live ? 12 : 0)));
  const height = Math.ceil(lines.reduce((sum, l) => sum + l.font.line, 0) + 2 * PAD_Y);
  return { lines, width, height };
}

function when(ms) {
  return Number.isFinite(ms) ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "";
}

export function drawLineage(container, trace, targetId, onOpen) {
  const model = lineageModel(trace);
  const titled = model.nodes.some((n) => n.session?.title?.title);
  const labels = new Map(model.nodes.map((n) => [n.key, nodeLabel(n)]));
  const g = new window.dagre.graphlib.Graph();
  g.setGraph({ rankdir: "LR", nodesep: 10, ranksep: 30, marginx: 12, marginy: 12, ranker: topDownRanks });
  g.setDefaultEdgeLabel(() => ({}));
  const keyOf = new Map();
  for (const n of model.nodes) {
    keyOf.set(n.id, n.key);
    const { width, height } = labels.get(n.key);
    g.setNode(n.key, { width, height });
  }
  // Edges in preorder of their child, so dagre's walk meets siblings in order.
  const parentOf = new Map(model.edges.map((e) => [e.childId, e]));
  for (const n of model.nodes) {
    const e = parentOf.get(n.id);
    if (e && keyOf.has(e.parentId)) g.setEdge(keyOf.get(e.parentId), n.key);
  }
  window.dagre.layout(g, { customOrder: preorderRanks });
  performance.mark("ui:lineage-laid-out");

  // One markup string parsed once: at 1,000 nodes several times faster than
  // building 5,000 elements one by one. Every value from the API is escaped.
  const size = g.graph();
  const width = Math.ceil(size.width);
  const height = Math.ceil(size.height);
  const out = [
    `<svg xmlns="${SVG}" class="lineage-svg" width="${width}" height="${height}" ` +
      `viewBox="0 0 ${width} ${height}" role="group" ` +
      `aria-label="${esc(`Lineage of ${targetId}: ${trace.graph.nodes.length} sessions`)}">` +
      '<defs><marker id="lineage-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" ' +
      'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" class="arrow-head"/>' +
      '</marker></defs><g class="edges">',
  ];
  for (const e of model.edges) {
    const from = keyOf.get(e.parentId);
    const to = keyOf.get(e.childId);
    if (!from || !to) continue;
    const points = g.edge(from, to)?.points ?? [];
    if (!points.length) continue;
    const d = points.map((p, i) => `${i ? "L" : "M"} ${p.x.toFixed(1)} ${p.y.toFixed(1)}`).join(" ");
    out.push(
      `<path d="${d}" class="${e.ghost ? "edge ghost" : "edge"}" marker-end="url(#lineage-arrow)" ` +
        `data-parent="${esc(e.parentId)}" data-child="${esc(e.childId)}"/>`,
    );
  }
  out.push('</g><g class="nodes">');
  let targetBox = null;
  for (const n of model.nodes) {
    const box = g.node(n.key);
    const label = labels.get(n.key);
    const x = (box.x - label.width / 2).toFixed(1);
    const y = (box.y - label.height / 2).toFixed(1);
    const classes = ["node"];
    if (n.ghost) classes.push("ghost");
    if (n.id === targetId) classes.push("target");
    if (n.session?.live) classes.push("live");
    let role;
    let title;
    if (n.ghost) {
      role =
        'data-ghost="true" role="img" ' +
        `aria-label="${esc(`Unresolved parent ${n.id}: not in the corpus you can see`)}"`;
      title = `${n.id}\nnot in the corpus (or outside your token's scope)`;
    } else {
      const h = n.session.header ?? {};
      const label = `Open session ${n.id}${n.id === targetId ? " (shown)" : ""}`;
      role = `role="button" tabindex="0" aria-label="${esc(label)}"`;
      title = [n.id, when(h.createdAt), h.origin ? `origin ${h.origin}` : ""].filter(Boolean).join("\n");
    }
    // Title lines are set as text after the markup is parsed; id lines are escaped.
    let top = PAD_Y;
    const texts = label.lines.map((line) => {
      top += line.font.line;
      const y = (top - (line.font.line - line.font.size) / 2 - 2).toFixed(1);
      if (line.kind === "title") return `<text x="${PAD_X}" y="${y}" class="node-title"></text>`;
      const cls = line.kind === "id" ? ' class="node-id"' : "";
      return `<text x="${PAD_X}" y="${y}"${cls}>${esc(line.text)}</text>`;
    });
    out.push(
      `<g class="${classes.join(" ")}" transform="translate(${x} ${y})" ` +
        `data-session-id="${esc(n.id)}" ${role}><title>${esc(title)}</title>` +
        `<rect width="${label.width}" height="${label.height}" rx="5"/>` +
        (n.session?.live ? `<circle cx="${label.width - 9}" cy="9" r="4" class="live-dot"/>` : "") +
        `${texts.join("")}</g>`,
    );
    if (n.id === targetId) targetBox = { x: box.x, y: box.y, width: label.width, height: label.height };
  }
  out.push("</g></svg>");
  const holder = document.createElement("div");
  holder.innerHTML = out.join("");
  const svg = holder.firstElementChild;
  if (titled) {
    const drawn = svg.querySelectorAll("g.node");
    model.nodes.forEach((n, i) => {
      const title = n.session?.title?.title;
      if (!title) return;
      const node = drawn[i];
      node.dataset.title = title;
      const lines = labels.get(n.key).lines.filter((line) => line.kind === "title");
      node.querySelectorAll("text.node-title").forEach((text, j) => {
        text.textContent = lines[j].text;
      });
      node.querySelector("title").textContent = `${title}\n${node.querySelector("title").textContent}`;
      node.setAttribute("aria-label", `Open session ${title} (${n.id})${n.id === targetId ? " (shown)" : ""}`);
    });
  }

  // One listener each for the whole drawing (a thousand nodes need no thousand closures).
  const openFrom = (event) => {
    const node = event.target.closest?.('.node[role="button"]');
    if (node) onOpen(node.dataset.sessionId);
  };
  svg.addEventListener("click", openFrom);
  svg.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      openFrom(event);
    }
  });
  svg.dataset.width = String(width);
  svg.dataset.height = String(height);
  if (targetBox) {
    svg.dataset.targetX = String(targetBox.x + targetBox.width / 2 + 12);
    svg.dataset.targetY = String(targetBox.y + targetBox.height / 2 + 12);
  }
  container.replaceChildren(svg);
  return model;
}

const ZOOM_STEP = 1.25;
const MIN_SCALE = 0.05;
const MAX_SCALE = 4;
const AUTO_FIT_FROM = 0.5; // a drawing that fits at this scale or more is fitted when drawn

// Pan and zoom of the lineage pane: the drawing is scaled (its viewBox kept), the pane
// scrolls (visible scrollbars) and pans by dragging its background; Fit scales the whole
// tree into the pane, whatever its size. The scale is in the pane's `data-scale`.
export class LineageZoom {
  constructor(view, { fit, zoomIn, zoomOut }) {
    this.view = view;
    this.fitButton = fit;
    this.scale = 1;
    fit.addEventListener("click", () => this.fit());
    zoomIn.addEventListener("click", () => this.zoom(this.scale * ZOOM_STEP));
    zoomOut.addEventListener("click", () => this.zoom(this.scale / ZOOM_STEP));
    view.addEventListener(
      "wheel",
      (event) => {
        if (!event.ctrlKey && !event.metaKey) return; // a plain wheel scrolls
        event.preventDefault();
        this.zoom(this.scale * (event.deltaY < 0 ? ZOOM_STEP : 1 / ZOOM_STEP));
      },
      { passive: false },
    );
    let drag = null;
    view.addEventListener("pointerdown", (event) => {
      if (event.button !== 0 || event.target.closest?.(".node")) return;
      drag = { x: event.clientX, y: event.clientY, left: view.scrollLeft, top: view.scrollTop, id: event.pointerId };
      view.setPointerCapture(event.pointerId);
      view.classList.add("panning");
    });
    view.addEventListener("pointermove", (event) => {
      if (!drag || event.pointerId !== drag.id) return;
      view.scrollLeft = drag.left - (event.clientX - drag.x);
      view.scrollTop = drag.top - (event.clientY - drag.y);
    });
    const end = (event) => {
      if (!drag || event.pointerId !== drag.id) return;
      drag = null;
      view.classList.remove("panning");
    };
    view.addEventListener("pointerup", end);
    view.addEventListener("pointercancel", end);
  }

  svg() {
    return this.view.querySelector("svg.lineage-svg");
  }

  // The scale at which the whole drawing fits the pane (no scrollbars needed).
  fitScale() {
    const svg = this.svg();
    if (!svg) return 1;
    const w = Number(svg.dataset.width);
    const h = Number(svg.dataset.height);
    const box = this.view.getBoundingClientRect();
    return Math.max(MIN_SCALE, Math.min(MAX_SCALE, (box.width - 2) / w, (box.height - 2) / h));
  }

  apply(scale, { keepCenter = true } = {}) {
    const svg = this.svg();
    if (!svg) return;
    const view = this.view;
    const cx = (view.scrollLeft + view.clientWidth / 2) / this.scale;
    const cy = (view.scrollTop + view.clientHeight / 2) / this.scale;
    this.scale = Math.max(MIN_SCALE, Math.min(MAX_SCALE, scale));
    svg.setAttribute("width", String(Math.floor(Number(svg.dataset.width) * this.scale)));
    svg.setAttribute("height", String(Math.floor(Number(svg.dataset.height) * this.scale)));
    view.dataset.scale = this.scale.toFixed(4);
    if (keepCenter) {
      view.scrollLeft = cx * this.scale - view.clientWidth / 2;
      view.scrollTop = cy * this.scale - view.clientHeight / 2;
    }
    // Overflow is never silent: Fit is marked while part of the tree is out of view.
    const over = view.scrollWidth > view.clientWidth + 1 || view.scrollHeight > view.clientHeight + 1;
    this.fitButton.classList.toggle("needed", over);
    this.fitButton.title = over
      ? "Part of the tree is out of view (drag or scroll to pan): fit the whole tree in the pane"
      : "Fit the whole tree in the pane";
  }

  zoom(scale) {
    this.apply(scale);
  }

  fit() {
    this.apply(this.fitScale(), { keepCenter: false });
    this.view.scrollLeft = 0;
    this.view.scrollTop = 0;
  }

  // A new drawing: fitted when that keeps it readable, else at full size scrolled only as
  // far as it takes to show the target (so its ancestors stay in view).
  drawn() {
    const svg = this.svg();
    if (!svg) return;
    this.scale = 1;
    const fits = this.fitScale();
    if (fits >= AUTO_FIT_FROM) {
      this.apply(Math.min(1, fits), { keepCenter: false });
      return;
    }
    this.apply(1, { keepCenter: false });
    const view = this.view;
    view.scrollLeft = Math.max(0, Number(svg.dataset.targetX ?? 0) - view.clientWidth);
    view.scrollTop = Math.max(0, Number(svg.dataset.targetY ?? 0) - view.clientHeight);
  }
}
