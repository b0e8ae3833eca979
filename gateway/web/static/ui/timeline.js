// The surface panel: a session's events by seq in three lanes (CURRENT,
// SHADOWED, LOG_ONLY), replacement arrows from each replacer to what it
// replaced, runs of stream chunks collapsed into one row.
//
// Virtual: only the rows in view (plus a margin) are in the DOM, so a log of
// 10,000 events costs what forty rows cost; the rows themselves are computed
// from the loaded events in one pass.
// Fixed-height rows make the virtual list a few lines of arithmetic, so it is
// written here instead of vendoring a virtual-list package (most need a bundler).

const SVG = "http://www.w3.org/2000/svg";
export const ROW_H = 26;
const OVERSCAN = 12;
const SEQ_COL = 60;
export const LANES = ["CURRENT", "SHADOWED", "LOG_ONLY"];
const CHUNK_TYPE = "assistant/chunk";

function typeClass(type) {
  return `type-${String(type).split("/")[0].replace(/[^a-z0-9-]/gi, "")}`;
}

export class Timeline {
  constructor(container, { onOpen, onMove }) {
    this.container = container;
    this.onOpen = onOpen;
    this.onMove = onMove ?? (() => {});
    this.spacer = document.createElement("div");
    this.spacer.className = "timeline-spacer";
    this.slice = document.createElement("div");
    this.slice.className = "timeline-slice";
    this.arrows = document.createElementNS(SVG, "svg");
    this.arrows.setAttribute("class", "timeline-arrows");
    this.arrows.setAttribute("aria-hidden", "true");
    this.spacer.append(this.arrows, this.slice);
    this.container.replaceChildren(this.spacer);
    this.reset();
    this.frame = 0;
    container.addEventListener("scroll", () => this.schedule());
    window.addEventListener("resize", () => this.schedule());
    container.addEventListener("keydown", (event) => this.key(event));
    container.addEventListener("click", (event) => {
      const row = event.target.closest?.(".row");
      if (row) this.activate(Number(row.dataset.row));
    });
  }

  reset() {
    this.events = [];
    this.replacedBy = new Map(); // shadowed seq -> replacer seq
    this.expanded = new Set(); // first seq of each expanded chunk run
    this.rows = [];
    this.rowOfSeq = new Map();
    this.cursor = -1;
    this.selectedSeq = null;
    this.drawnOnce = false;
    this.render();
  }

  setEvents(events) {
    this.events = events;
    this.rebuild();
  }

  setReplacements(pairs) {
    this.replacedBy = new Map(pairs);
    this.render();
  }

  rebuild() {
    const rows = [];
    const rowOfSeq = new Map();
    const evs = this.events;
    for (let i = 0; i < evs.length; ) {
      const ev = evs[i];
      let j = i;
      if (ev.type === CHUNK_TYPE) {
        while (j + 1 < evs.length && evs[j + 1].type === CHUNK_TYPE && evs[j + 1].seq === evs[j].seq + 1) j++;
      }
      if (j > i && !this.expanded.has(ev.seq)) {
        const index = rows.length;
        rows.push({ run: true, from: ev.seq, to: evs[j].seq, count: j - i + 1, lane: "LOG_ONLY", ev });
        for (let k = i; k <= j; k++) rowOfSeq.set(evs[k].seq, index);
      } else {
        for (let k = i; k <= j; k++) {
          rowOfSeq.set(evs[k].seq, rows.length);
          rows.push({ run: false, lane: evs[k].surface, ev: evs[k], runStart: j > i ? ev.seq : null });
        }
      }
      i = j + 1;
    }
    this.rows = rows;
    this.rowOfSeq = rowOfSeq;
    if (this.selectedSeq !== null) this.cursor = rowOfSeq.get(this.selectedSeq) ?? this.cursor;
    this.spacer.style.height = `${rows.length * ROW_H}px`;
    this.render();
  }

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
    });
  }

  laneX(lane, width) {
    const laneW = (width - SEQ_COL) / 3;
    return SEQ_COL + laneW * Math.max(0, LANES.indexOf(lane)) + 6;
  }

  render() {
    const rows = this.rows;
    const top = this.container.scrollTop;
    const height = this.container.clientHeight || 400;
    const first = Math.max(0, Math.floor(top / ROW_H) - OVERSCAN);
    const last = Math.min(rows.length - 1, Math.ceil((top + height) / ROW_H) + OVERSCAN);
    const fragment = document.createDocumentFragment();
    for (let i = first; i <= last; i++) fragment.appendChild(this.rowElement(rows[i], i));
    this.slice.replaceChildren(fragment);
    this.drawArrows(first, last);
    if (rows.length && !this.drawnOnce) {
      this.drawnOnce = true;
      performance.mark("ui:timeline-rows");
    }
    const active = this.cursor >= first && this.cursor <= last ? `row-${this.cursor}` : null;
    if (active) this.container.setAttribute("aria-activedescendant", active);
    else this.container.removeAttribute("aria-activedescendant");
  }

  rowElement(row, index) {
    const div = document.createElement("div");
    div.className = "row";
    div.id = `row-${index}`;
    div.dataset.row = String(index);
    div.dataset.lane = row.lane;
    div.setAttribute("role", "option");
    div.style.top = `${index * ROW_H}px`;
    const seq = document.createElement("span");
    seq.className = "seq";
    const chip = document.createElement("span");
    chip.className = `chip lane-${row.lane.toLowerCase().replace("_", "-")} ${typeClass(row.ev.type)}`;
    if (row.run) {
      div.classList.add("run");
      div.dataset.seqFrom = String(row.from);
      div.dataset.seqTo = String(row.to);
      seq.textContent = `${row.from}–${row.to}`;
      chip.textContent = `▸ ${row.count} × ${row.ev.type}`;
      div.setAttribute("aria-label", `${row.count} stream chunks, seq ${row.from} to ${row.to}, collapsed; Enter expands`);
      div.setAttribute("aria-expanded", "false");
    } else {
      const ev = row.ev;
      div.dataset.seq = String(ev.seq);
      seq.textContent = String(ev.seq);
      const op = ev.surfaceOp?.kind === "REPLACE" ? ` ⟲ ${ev.surfaceOp.start}–${ev.surfaceOp.end}` : "";
      chip.textContent = `${row.runStart !== null ? "▾ " : ""}${ev.type}${op}`;
      div.setAttribute("aria-label", `seq ${ev.seq}, ${ev.type}, ${ev.surface}`);
      if (row.runStart !== null) div.setAttribute("aria-expanded", "true");
      if (ev.seq === this.selectedSeq) {
        div.classList.add("selected");
        div.setAttribute("aria-selected", "true");
      } else {
        div.setAttribute("aria-selected", "false");
      }
    }
    if (index === this.cursor) div.classList.add("cursor");
    div.append(seq, chip);
    return div;
  }

  drawArrows(first, last) {
    const width = this.container.clientWidth || 600;
    const svg = this.arrows;
    const y0 = first * ROW_H;
    const h = Math.max(0, (last - first + 1) * ROW_H);
    svg.setAttribute("width", String(width));
    svg.setAttribute("height", String(h));
    svg.style.top = `${y0}px`;
    const parts = [];
    for (const [shadowed, replacer] of this.replacedBy) {
      const a = this.rowOfSeq.get(replacer);
      const b = this.rowOfSeq.get(shadowed);
      if (a === undefined || b === undefined) continue;
      if ((a < first && b < first) || (a > last && b > last)) continue;
      const ra = this.rows[a];
      const rb = this.rows[b];
      const x1 = this.laneX(ra.lane, width) - 2;
      const x2 = this.laneX(rb.lane, width) - 2;
      const ya = a * ROW_H + ROW_H / 2 - y0;
      const yb = b * ROW_H + ROW_H / 2 - y0;
      const bend = 14 + Math.min(40, Math.abs(a - b) * 2);
      parts.push(
        `<path class="replace-arrow" data-from="${replacer}" data-to="${shadowed}" marker-end="url(#tl-arrow)" ` +
          `d="M ${x1} ${ya} C ${x1 - bend} ${ya}, ${x2 - bend} ${yb}, ${x2} ${yb}"/>`,
      );
    }
    // Markup built from numbers only (seqs and coordinates), never from event data.
    svg.innerHTML =
      '<defs><marker id="tl-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" ' +
      'markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" class="arrow-head"/>' +
      `</marker></defs>${parts.join("")}`;
  }

  key(event) {
    const n = this.rows.length;
    if (!n) return;
    const page = Math.max(1, Math.floor(this.container.clientHeight / ROW_H) - 1);
    const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page, Home: -Infinity, End: Infinity };
    if (event.key in moves) {
      event.preventDefault();
      const next = Math.min(n - 1, Math.max(0, (this.cursor < 0 ? -1 : this.cursor) + moves[event.key]));
      this.moveTo(next);
    } else if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      if (this.cursor >= 0) this.activate(this.cursor);
    }
  }

  moveTo(index) {
    this.cursor = index;
    this.scrollToRow(index);
    this.render();
    this.onMove(this.rows[index]);
  }

  scrollToRow(index) {
    const top = index * ROW_H;
    const view = this.container;
    if (top < view.scrollTop) view.scrollTop = top;
    else if (top + ROW_H > view.scrollTop + view.clientHeight) view.scrollTop = top + ROW_H - view.clientHeight;
  }

  activate(index) {
    const row = this.rows[index];
    if (!row) return;
    this.cursor = index;
    if (row.run) {
      this.expanded.add(row.from);
      this.rebuild();
      return;
    }
    this.onOpen(row.ev.seq);
  }

  // Mark `seq` selected (from a click, the keyboard or the URL) and bring it into view.
  select(seq) {
    this.selectedSeq = seq;
    if (seq === null) {
      this.render();
      return;
    }
    let index = this.rowOfSeq.get(seq);
    if (index !== undefined && this.rows[index].run) {
      this.expanded.add(this.rows[index].from);
      this.rebuild();
      index = this.rowOfSeq.get(seq);
    }
    if (index !== undefined) {
      this.cursor = index;
      const view = this.container;
      const top = index * ROW_H;
      if (top < view.scrollTop || top + ROW_H > view.scrollTop + view.clientHeight) {
        view.scrollTop = Math.max(0, top - view.clientHeight / 3);
      }
    }
    this.render();
  }
}
