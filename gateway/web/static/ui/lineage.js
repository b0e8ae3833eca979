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
// titles are set as text after the markup is parsed, never written into it.

const SVG = "http://www.w3.org/2000/svg";
const NODE_W = 164;
const NODE_H_PLAIN = 30;
const TITLED_H = 40; // a title line and the id line
const LABEL_CHARS = 21;
const TITLE_CHARS = 19; // the title line is bold
const ID_CHARS = 26; // the id line is smaller

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

function shortLabel(text, chars = LABEL_CHARS) {
  const points = Array.from(text); // never cut a character outside the BMP in two
  return points.length > chars ? `${points.slice(0, chars - 1).join("")}…` : text;
}

function when(ms) {
  return Number.isFinite(ms) ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "";
}

export function drawLineage(container, trace, targetId, onOpen) {
  const model = lineageModel(trace);
  const titled = model.nodes.some((n) => n.session?.title?.title);
  const NODE_H = titled ? TITLED_H : NODE_H_PLAIN;
  const g = new window.dagre.graphlib.Graph();
  g.setGraph({ rankdir: "LR", nodesep: 10, ranksep: 30, marginx: 12, marginy: 12, ranker: topDownRanks });
  g.setDefaultEdgeLabel(() => ({}));
  const keyOf = new Map();
  for (const n of model.nodes) {
    keyOf.set(n.id, n.key);
    g.setNode(n.key, { width: NODE_W, height: NODE_H });
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
    const x = (box.x - NODE_W / 2).toFixed(1);
    const y = (box.y - NODE_H / 2).toFixed(1);
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
    out.push(
      `<g class="${classes.join(" ")}" transform="translate(${x} ${y})" ` +
        `data-session-id="${esc(n.id)}" ${role}><title>${esc(title)}</title>` +
        `<rect width="${NODE_W}" height="${NODE_H}" rx="5"/>` +
        (n.session?.live ? `<circle cx="${NODE_W - 9}" cy="9" r="4" class="live-dot"/>` : "") +
        (n.session?.title?.title
          ? `<text x="8" y="16" class="node-title"></text>` +
            `<text x="8" y="31" class="node-id">${esc(shortLabel(n.id, ID_CHARS))}</text></g>`
          : `<text x="8" y="${NODE_H / 2 + 4}">${esc(n.ghost ? `? ${shortLabel(n.id)}` : shortLabel(n.id))}</text></g>`),
    );
    if (n.id === targetId) targetBox = { x: box.x, y: box.y };
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
      node.querySelector("text.node-title").textContent = shortLabel(title, TITLE_CHARS);
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
  container.replaceChildren(svg);
  if (targetBox) {
    // Scroll only as far as it takes to show the target, so its ancestors stay in view.
    const { clientWidth: w, clientHeight: h } = container;
    container.scrollLeft = Math.max(0, targetBox.x + NODE_W / 2 + 12 - w);
    container.scrollTop = Math.max(0, targetBox.y + NODE_H / 2 + 12 - h);
  }
  return model;
}
