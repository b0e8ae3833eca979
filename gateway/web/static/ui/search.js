// Full-text search (SPEC §13) as the page shows it: `searchSessions` in the
// sessions panel (each session with its best match; a click opens that event),
// and `searchEvents` within the open session (a click selects the hit).
//
// Pages follow the API's cursors and nothing else: the order, the snippets and
// the highlights are the API's, shown as they come.

import { arrowKeys, h, message, sessionLabel, when } from "./dom.js";
import { markedSnippet } from "./highlight.js";

export const SEARCH_PAGE = 20;
export const HITS_PAGE = 20;

const HIT_FIELDS = "snippet highlights { start length }";

function sessionsQuery(features) {
  const title = features.titles ? " title { title sourceKind }" : "";
  return `query ViewerSearch($query: String!, $filter: SessionFilter, $first: Int!, $after: String) {
  searchSessions(query: $query, filter: $filter, first: $first, after: $after) {
    pageInfo { hasNextPage endCursor }
    nodes { session { id live persisted header { createdAt cwd origin }${title} }
      bestMatch { event { seq type time } ${HIT_FIELDS} } } } }`;
}

const Q_FIND = `query ViewerFind($id: ID!, $query: String!, $first: Int!, $after: String) {
  searchEvents(sessionId: $id, query: $query, first: $first, after: $after) {
    pageInfo { hasNextPage endCursor }
    nodes { event { seq type time surface } ${HIT_FIELDS} } } }`;

function hitMeta(event) {
  return [`seq ${event.seq}`, event.type, when(event.time)].filter(Boolean).join(" · ");
}

// The search box of the sessions panel and its pages of results.
export class SessionSearch {
  // els: {form, input, view, list, status, prev, next, page, clear}; onOpen(id, seq);
  // onAuth(error) -> true when the error was a missing/refused token; onShow(bool);
  // onSearch(query): the user asked a new search (or cleared it); features() ->
  // Promise of what the schema has.
  constructor(api, els, { onOpen, onAuth, onShow, onSearch, features }) {
    this.api = api;
    this.els = els;
    this.onOpen = onOpen;
    this.onAuth = onAuth;
    this.onShow = onShow;
    this.onSearch = onSearch;
    this.features = features;
    this.filter = null;
    this.query = "";
    this.generation = 0;
    this.reset();
    els.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.search(els.input.value);
      this.onSearch(this.query);
    });
    els.clear.addEventListener("click", () => {
      this.search("");
      this.onSearch(this.query);
    });
    els.list.addEventListener("click", (event) => {
      const hit = event.target.closest("button.hit");
      if (hit) this.onOpen(hit.dataset.sessionId, Number(hit.dataset.seq));
    });
    arrowKeys(els.list, "button.hit");
    els.next.addEventListener("click", () => {
      if (!this.nextCursor) return;
      this.pages = this.pages.slice(0, this.pageIndex + 1);
      this.pages.push(this.nextCursor);
      this.pageIndex++;
      this.load();
    });
    els.prev.addEventListener("click", () => {
      if (this.pageIndex === 0) return;
      this.pageIndex--;
      this.load();
    });
  }

  reset() {
    this.pages = [null];
    this.pageIndex = 0;
    this.nextCursor = null;
  }

  get active() {
    return this.query !== "";
  }

  enable(features) {
    this.els.form.hidden = !features.searchSessions;
  }

  // A new filter (from the filters form): cursors of the old one are refused, so
  // the results start again from their first page.
  setFilter(filter) {
    this.filter = filter;
    if (this.active) {
      this.reset();
      this.load();
    }
  }

  // Show the results for `text` (from the box, or from the URL: the box shows it too).
  search(text) {
    this.query = text.trim();
    if (this.els.input.value.trim() !== this.query) this.els.input.value = this.query;
    this.reset();
    this.generation++;
    this.els.view.hidden = !this.active;
    this.onShow(this.active);
    if (this.active) this.load();
    else {
      this.els.list.replaceChildren();
      delete this.els.list.dataset.page;
    }
  }

  async load() {
    const { list, status } = this.els;
    const generation = ++this.generation;
    list.setAttribute("aria-busy", "true");
    delete list.dataset.page;
    status.textContent = "Searching…";
    status.className = "muted";
    try {
      const features = await this.features();
      if (generation !== this.generation) return;
      if (!features.searchSessions) throw new Error("this gateway does not search (no searchSessions)");
      const { data } = await this.api.request(sessionsQuery(features), {
        query: this.query,
        filter: this.filter,
        first: SEARCH_PAGE,
        after: this.pages[this.pageIndex],
      });
      if (generation !== this.generation) return;
      this.render(data.searchSessions);
    } catch (error) {
      if (generation !== this.generation) return;
      list.replaceChildren();
      if (!this.onAuth(error)) {
        status.textContent = message(error);
        status.className = "warn";
      }
      list.dataset.page = "error";
    } finally {
      if (generation === this.generation) list.removeAttribute("aria-busy");
    }
  }

  render(conn) {
    const { list, status, prev, next, page } = this.els;
    const items = conn.nodes.map(({ session, bestMatch }) =>
      h(
        "li",
        {},
        h(
          "button",
          { type: "button", class: "hit", "data-session-id": session.id, "data-seq": bestMatch.event.seq, title: session.id },
          sessionLabel(session),
          h(
            "span",
            { class: "badges" },
            session.live ? h("span", { class: "badge live" }, "live") : null,
            session.persisted ? h("span", { class: "badge persisted" }, "persisted") : null,
          ),
          h("span", { class: "meta" }, hitMeta(bestMatch.event)),
          markedSnippet(bestMatch.snippet, bestMatch.highlights),
        ),
      ),
    );
    list.replaceChildren(...items);
    const from = this.pageIndex * SEARCH_PAGE;
    status.className = "muted";
    status.textContent = conn.nodes.length
      ? `Sessions ranked by their best match for “${this.query}”`
      : from
        ? "No more sessions match."
        : `No session matches “${this.query}”.`;
    page.textContent = conn.nodes.length ? `${from + 1}–${from + conn.nodes.length}` : "";
    prev.disabled = this.pageIndex === 0;
    next.disabled = !conn.pageInfo.hasNextPage;
    this.nextCursor = conn.pageInfo.endCursor;
    list.dataset.page = String(this.pageIndex);
  }
}

// "Find in this session": searchEvents over the open session, pages appended.
export class EventSearch {
  // els: {form, input, view, list, status, more, clear}; onSelect(seq); onAuth(error).
  constructor(api, els, { onSelect, onAuth }) {
    this.api = api;
    this.els = els;
    this.onSelect = onSelect;
    this.onAuth = onAuth;
    this.sessionId = null;
    this.query = "";
    this.generation = 0;
    this.cursor = null;
    this.shown = 0;
    els.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.search(els.input.value);
    });
    els.clear.addEventListener("click", () => {
      els.input.value = "";
      this.search("");
    });
    els.more.addEventListener("click", () => this.load(true));
    els.list.addEventListener("click", (event) => {
      const hit = event.target.closest("button.hit");
      if (hit) this.onSelect(Number(hit.dataset.seq));
    });
    arrowKeys(els.list, "button.hit");
  }

  enable(features) {
    this.enabled = features.searchEvents;
    this.els.form.hidden = !this.enabled || this.sessionId === null;
  }

  // Another session opened: its hits are not this one's.
  open(sessionId) {
    this.sessionId = sessionId;
    this.els.form.hidden = !this.enabled || sessionId === null;
    this.els.input.value = "";
    this.search("");
  }

  search(text) {
    this.query = text.trim();
    this.generation++;
    this.cursor = null;
    this.shown = 0;
    this.els.list.replaceChildren();
    delete this.els.list.dataset.state;
    this.els.view.hidden = this.query === "";
    if (this.query !== "" && this.sessionId !== null) this.load(false);
  }

  async load(more) {
    const { list, status, more: moreButton } = this.els;
    const generation = ++this.generation;
    const sessionId = this.sessionId;
    list.setAttribute("aria-busy", "true");
    list.dataset.state = "loading";
    status.textContent = "Searching…";
    status.className = "muted";
    moreButton.hidden = true;
    try {
      const { data } = await this.api.request(Q_FIND, {
        id: sessionId,
        query: this.query,
        first: HITS_PAGE,
        after: more ? this.cursor : null,
      });
      if (generation !== this.generation) return;
      const conn = data.searchEvents;
      const items = conn.nodes.map((hit) =>
        h(
          "li",
          {},
          h(
            "button",
            { type: "button", class: "hit", "data-seq": hit.event.seq },
            h("span", { class: "meta" }, hitMeta(hit.event), " ", h("span", { class: `badge lane-${hit.event.surface.toLowerCase().replace("_", "-")}` }, hit.event.surface)),
            markedSnippet(hit.snippet, hit.highlights),
          ),
        ),
      );
      list.append(...items);
      this.shown += conn.nodes.length;
      this.cursor = conn.pageInfo.endCursor;
      moreButton.hidden = !conn.pageInfo.hasNextPage;
      status.textContent = this.shown
        ? `${this.shown} event${this.shown === 1 ? "" : "s"} shown${conn.pageInfo.hasNextPage ? ", more below" : ""}`
        : `No event here matches “${this.query}”.`;
      list.dataset.state = "complete";
      list.dataset.count = String(this.shown);
    } catch (error) {
      if (generation !== this.generation) return;
      if (!this.onAuth(error)) {
        status.textContent = message(error);
        status.className = "warn";
      }
      list.dataset.state = "error";
    } finally {
      if (generation === this.generation) list.removeAttribute("aria-busy");
    }
  }
}
