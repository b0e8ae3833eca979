// The viewer page: wires the session list (with its filters and the search
// box), the lineage, the surface timeline, the event detail and the search
// within a session to /graphql, and keeps the selection in the URL
// (`/ui?session=ID&seq=N&q=SEARCH`) so every view can be shared and the back
// button works.

import { Api, ApiError } from "./api.js";
import { arrowKeys, copyText, h, message, sessionLabel, when } from "./dom.js";
import { downloadWithToken, exportName, exportUrl } from "./export.js";
import { CURRENT, detectFeatures } from "./features.js";
import { describe, sessionFilter } from "./filters.js";
import { LineageZoom, drawLineage } from "./lineage.js";
import { tail } from "./live.js";
import { EventSearch, SessionSearch } from "./search.js";
import { Timeline } from "./timeline.js";

const PAGE_SIZE = 25;
const EVENTS_PAGE = 500;
const LIST_REFRESH_MS = 5000;
const SURFACE_SHOWN = 1000;
const DATA_SHOWN = 200_000;

const TITLE = " title { title sourceKind }";

// The queries name titles and filters only when the schema has them (features.js).
function sessionsQuery(features) {
  const fields = `id live persisted header { createdAt cwd origin parentSessionId }${features.titles ? TITLE : ""}`;
  if (!features.sessionFilter) {
    return `query ViewerSessions($first: Int!, $after: String) {
  sessions(first: $first, after: $after) {
    totalCount pageInfo { hasNextPage endCursor } nodes { ${fields} } } }`;
  }
  return `query ViewerSessions($first: Int!, $after: String, $filter: SessionFilter) {
  sessions(first: $first, after: $after, filter: $filter) {
    totalCount pageInfo { hasNextPage endCursor } nodes { ${fields} } } }`;
}
function traceQuery(features) {
  return `query ViewerLineage($id: ID!) {
  traceSession(sessionId: $id) { complete unresolvedParentId
    graph { nodes { id live header { createdAt origin parentSessionId }${features.titles ? TITLE : ""} }
      edges { parentId childId } } } }`;
}
const Q_EVENTS = `query ViewerEvents($id: ID!, $first: Int!, $after: String) {
  session(id: $id) { live }
  events(sessionId: $id, first: $first, after: $after) {
    totalCount pageInfo { hasNextPage endCursor }
    nodes { seq type time surface surfaceOp { kind start end } } } }`;
const Q_SHADOWED = `query ViewerShadowed($id: ID!, $first: Int!, $after: String) {
  events(sessionId: $id, surface: [SHADOWED], first: $first, after: $after) {
    pageInfo { hasNextPage endCursor } nodes { seq replacedBy { seq } } } }`;
const Q_SURFACE = `query ViewerSurface($id: ID!) { session(id: $id) { id live surface { seq type } } }`;
const Q_EVENT = `query ViewerEvent($id: ID!, $seq: Int!) {
  event(sessionId: $id, seq: $seq) { seq type time ignorable surface
    surfaceOp { kind start end } sourceEventSeqs data
    trace { replacedBy replacementChain replacedEventSeqs sourceEventSeqs derivedEventSeqs } } }`;
const Q_WINDOW = `query ViewerWindow($id: ID!, $seq: Int!) {
  readEvent(sessionId: $id, seq: $seq, before: 3, after: 3) {
    startSeq endSeq events { seq type surface } } }`;

performance.mark("ui:script-start");
const $ = (id) => document.getElementById(id);
const api = new Api(document.body.dataset.endpoint || "/graphql", document.body.dataset.auth === "on");
const EXPORT_PREFIX = document.body.dataset.export || "/sessions";

const state = {
  sessionId: null,
  seq: null,
  generation: 0, // bumped on every session change: late answers for an old one are dropped
  pages: [null], // `after` cursor of each visited page of sessions
  pageIndex: 0,
  listed: [],
  listLoading: false,
  listTicket: 0, // bumped by every load of the list: only the latest one is drawn
  eventsLoading: false,
  tail: null, // AbortController of the running live tail
  features: null, // Promise of what this gateway's schema has (features.js)
  filter: null, // the SessionFilter of the filters form, or null
};

// -- auth ---------------------------------------------------------------------------

function needToken(text) {
  const status = $("token-status");
  status.textContent = text;
  status.className = "warn";
  $("token-input").focus();
}

function handleAuth(error) {
  if (error instanceof ApiError && error.status === 401 && api.authOn) {
    needToken(api.token ? `Token refused: ${error.message}` : "This gateway needs a bearer token.");
    return true;
  }
  return false;
}

function setupAuth() {
  const form = $("token-form");
  if (!api.authOn) return true;
  form.hidden = false;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token-input").value.trim();
    if (!value) {
      needToken("Paste a token first.");
      return;
    }
    api.setToken(value);
    $("token-input").value = "";
    // One cheap request proves the token before the panels ask for their data.
    api.request("query ViewerToken { __typename }").then(
      () => {
        $("token-status").textContent = "Token kept for this tab only.";
        $("token-status").className = "ok";
        start();
      },
      (error) => {
        api.forgetToken();
        if (!handleAuth(error)) needToken(message(error));
        else needToken(`Token refused: ${error.message}`);
      },
    );
  });
  $("token-forget").addEventListener("click", () => {
    api.forgetToken();
    stopTail();
    state.generation++;
    $("sessions-list").replaceChildren();
    disablePaging();
    sessionSearch.search("");
    eventSearch.open(null);
    showNothingSelected();
    needToken("Token forgotten. Paste one to continue.");
  });
  if (!api.token) {
    needToken("This gateway needs a bearer token.");
    return false;
  }
  $("token-status").textContent = "Using the token kept for this tab.";
  $("token-status").className = "ok";
  return true;
}

// -- sessions -----------------------------------------------------------------------

// A load asked for by the user (another page, another filter) supersedes the one
// in flight; the periodic quiet refresh never does.
async function loadSessions({ quiet = false } = {}) {
  if (quiet && state.listLoading) return;
  const ticket = ++state.listTicket;
  state.listLoading = true;
  const list = $("sessions-list");
  if (!quiet) list.setAttribute("aria-busy", "true");
  const filter = state.filter;
  try {
    const features = await knownFeatures();
    const variables = { first: PAGE_SIZE, after: state.pages[state.pageIndex] };
    if (features.sessionFilter) variables.filter = filter;
    const { data } = await api.request(sessionsQuery(features), variables);
    if (ticket !== state.listTicket) return;
    const conn = data.sessions;
    state.listed = conn.nodes;
    renderSessions(conn);
    list.dataset.filter = JSON.stringify(filter);
  } catch (error) {
    if (ticket !== state.listTicket) return;
    disablePaging();
    if (!handleAuth(error)) $("sessions-count").textContent = `Could not list sessions: ${message(error)}`;
  } finally {
    if (ticket === state.listTicket) {
      state.listLoading = false;
      list.removeAttribute("aria-busy");
    }
  }
}

function renderSessions(conn) {
  const list = $("sessions-list");
  const focusedId = document.activeElement?.closest?.("#sessions-list") ? document.activeElement.dataset.sessionId : null;
  const items = conn.nodes.map((s) => {
    const meta = [when(s.header.createdAt), s.header.origin, s.header.cwd].filter(Boolean).join(" · ");
    const button = h(
      "button",
      { type: "button", class: "session", "data-session-id": s.id, "aria-current": s.id === state.sessionId ? "true" : null },
      sessionLabel(s),
      h(
        "span",
        { class: "badges" },
        s.live ? h("span", { class: "badge live" }, "live") : null,
        s.persisted ? h("span", { class: "badge persisted" }, "persisted") : null,
        s.header.parentSessionId ? h("span", { class: "badge fork", title: `forked from ${s.header.parentSessionId}` }, "fork") : null,
      ),
      h("span", { class: "meta" }, meta),
    );
    const copy = h(
      "button",
      { type: "button", class: "copy-id", "data-copy": s.id, title: "Copy the id", "aria-label": `Copy the id ${s.id}` },
      "Copy id",
    );
    return h("li", { class: "session-row" }, button, copy);
  });
  list.replaceChildren(...items);
  const empty = $("sessions-empty");
  empty.hidden = conn.nodes.length > 0;
  empty.textContent = state.filter
    ? "No session matches these filters: change them, or Reset to see every session."
    : state.pageIndex > 0
      ? "No more sessions: go back with Newer."
      : "No sessions yet. Import dsh JSONL artifacts with `session-gateway import PATH`, or try `session-gateway serve --demo`.";
  list.dataset.page = String(state.pageIndex);
  applyFilter();
  const from = state.pageIndex * PAGE_SIZE + (conn.nodes.length ? 1 : 0);
  $("sessions-count").textContent = state.filter ? `${conn.totalCount} match` : `${conn.totalCount} in all`;
  $("sessions-page").textContent = `${from}–${state.pageIndex * PAGE_SIZE + conn.nodes.length}`;
  $("sessions-prev").disabled = state.pageIndex === 0;
  $("sessions-next").disabled = !conn.pageInfo.hasNextPage;
  state.nextCursor = conn.pageInfo.hasNextPage ? conn.pageInfo.endCursor : null;
  if (focusedId) list.querySelector(`[data-session-id="${CSS.escape(focusedId)}"]`)?.focus();
}

function applyFilter() {
  const text = $("filter-input").value.trim().toLowerCase();
  for (const li of $("sessions-list").children) {
    const id = li.firstElementChild.dataset.sessionId.toLowerCase();
    li.hidden = Boolean(text) && !id.includes(text);
  }
}

function disablePaging() {
  $("sessions-prev").disabled = true;
  $("sessions-next").disabled = true;
  state.nextCursor = null;
}

const SELECT_EVENT = "Select an event on the surface (click a row, or focus it and use the arrow keys and Enter) to see its data and trace.";
const NOTHING_SELECTED =
  "Select a session in the list, then an event on its surface, to see the event's data, what it replaced and what replaced it.";

// No session open: every pane says what to do instead of staying blank.
function showNothingSelected() {
  document.title = "Session viewer";
  $("lineage-title").textContent = "Lineage";
  $("timeline-title").textContent = "Surface";
  $("lineage-status").textContent = "";
  $("timeline-status").textContent = "";
  $("lineage-view").replaceChildren();
  $("lineage-view").hidden = true;
  delete $("lineage-view").dataset.state;
  $("lineage-empty").hidden = false;
  timeline.reset();
  $("timeline-view").hidden = true;
  $("timeline-empty").hidden = false;
  for (const link of [$("export-session"), $("export-tree")]) link.hidden = true;
  $("event-detail").replaceChildren(h("p", { class: "empty" }, NOTHING_SELECTED));
  $("detail-title").textContent = "Event";
  $("surface-list").replaceChildren();
  eventSearch.open(null);
}

function markCurrent() {
  for (const button of $("sessions-list").querySelectorAll("button.session")) {
    if (button.dataset.sessionId === state.sessionId) button.setAttribute("aria-current", "true");
    else button.removeAttribute("aria-current");
  }
}

function setupSessions() {
  const list = $("sessions-list");
  list.addEventListener("click", (event) => {
    const copy = event.target.closest("button.copy-id");
    if (copy) {
      copyText(copy.dataset.copy).then(
        () => {
          copy.dataset.copied = copy.dataset.copy;
          copy.textContent = "Copied";
          setTimeout(() => {
            copy.textContent = "Copy id";
          }, 1500);
        },
        () => {
          copy.textContent = "Select and copy";
          const sid = copy.previousElementSibling?.querySelector(".sid");
          if (sid) getSelection()?.selectAllChildren(sid);
        },
      );
      return;
    }
    const button = event.target.closest("button.session");
    if (button) openSession(button.dataset.sessionId);
  });
  arrowKeys(list, "li:not([hidden]) button.session");
  $("sessions-next").addEventListener("click", () => {
    if (!state.nextCursor) return;
    state.pages = state.pages.slice(0, state.pageIndex + 1);
    state.pages.push(state.nextCursor);
    state.pageIndex++;
    loadSessions();
  });
  $("sessions-prev").addEventListener("click", () => {
    if (state.pageIndex === 0) return;
    state.pageIndex--;
    loadSessions();
  });
  $("sessions-refresh").addEventListener("click", () => loadSessions());
  $("filter-input").addEventListener("input", applyFilter);
  $("sessions-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = $("filter-input").value.trim();
    if (id) openSession(id);
  });
  setInterval(() => {
    if (document.hidden || !state.listed.some((s) => s.live)) return;
    if (api.authOn && !api.token) return;
    loadSessions({ quiet: true });
  }, LIST_REFRESH_MS);
}

// -- what the schema has ---------------------------------------------------------------

// Asked once per start, by the first panel that needs it; the others wait on the
// same answer. A refused token forgets the question, so the next token asks again.
function knownFeatures() {
  state.features ??= detectFeatures(api).then(
    (features) => {
      $("session-filters").hidden = !features.sessionFilter;
      sessionSearch.enable(features);
      eventSearch.enable(features);
      return features;
    },
    (error) => {
      state.features = null; // a refused token: ask again with the next one
      throw error;
    },
  );
  return state.features;
}

// -- filters of the session list --------------------------------------------------------

function readFilters() {
  return sessionFilter({
    cwd: $("filter-cwd").value,
    from: $("filter-from").value,
    to: $("filter-to").value,
    live: $("filter-live").checked,
    persisted: $("filter-persisted").checked,
  });
}

function applyFilters() {
  const filter = readFilters();
  const status = $("filters-status");
  const { from, to } = filter?.createdAt ?? {};
  if (from !== undefined && to !== undefined && from > to) {
    status.textContent = "The first day is after the last: nothing to apply.";
    status.className = "warn";
    return;
  }
  status.textContent = "";
  status.className = "muted";
  state.filter = filter;
  $("filters-summary").textContent = describe(filter);
  // A cursor is bound to its filter: start again from the first page.
  state.pages = [null];
  state.pageIndex = 0;
  loadSessions();
  sessionSearch.setFilter(filter);
}

function setupFilters() {
  $("filters-form").addEventListener("submit", (event) => {
    event.preventDefault();
    applyFilters();
  });
  $("filters-reset").addEventListener("click", () => {
    $("filter-cwd").value = "";
    $("filter-from").value = "";
    $("filter-to").value = "";
    $("filter-live").checked = true;
    $("filter-persisted").checked = true;
    applyFilters();
  });
}

// -- export of the open session -----------------------------------------------------------

function showExport(id) {
  for (const [link, descendants] of [[$("export-session"), false], [$("export-tree"), true]]) {
    link.href = exportUrl(EXPORT_PREFIX, id, descendants);
    link.setAttribute("download", exportName(id, descendants));
    link.hidden = false;
  }
}

function setupExport() {
  for (const link of [$("export-session"), $("export-tree")]) {
    link.addEventListener("click", (event) => {
      // Without auth the browser follows the link itself; with auth the token must go along.
      if (!api.authOn) return;
      event.preventDefault();
      const status = $("lineage-status");
      const before = status.textContent;
      status.textContent = "Exporting…";
      downloadWithToken(api, link).then(
        (bytes) => {
          status.textContent = `${before} · exported ${bytes} bytes`;
        },
        (error) => {
          if (error.status === 401) handleAuth(new ApiError(error.message, 401, "UNAUTHENTICATED"));
          status.textContent = `Export failed: ${message(error)}`;
        },
      );
    });
  }
}

// -- one session ----------------------------------------------------------------------

function url(sessionId, seq) {
  const params = new URLSearchParams();
  if (sessionId !== null) params.set("session", sessionId);
  if (seq !== null) params.set("seq", String(seq));
  if (sessionSearch.active) params.set("q", sessionSearch.query);
  const query = params.toString();
  return `${location.pathname}${query ? `?${query}` : ""}`;
}

function openSession(id, { push = true, seq = null } = {}) {
  stopTail();
  const generation = ++state.generation;
  state.sessionId = id;
  state.seq = seq;
  if (push) history.pushState({ session: id, seq }, "", url(id, seq));
  markCurrent();
  document.title = `${id} · Session viewer`;
  $("lineage-title").textContent = `Lineage of ${id}`;
  $("timeline-title").textContent = `Surface of ${id}`;
  $("lineage-empty").hidden = true;
  $("timeline-empty").hidden = true;
  $("lineage-view").hidden = false;
  $("timeline-view").hidden = false;
  showExport(id);
  eventSearch.open(id);
  $("event-detail").replaceChildren(h("p", { class: "empty" }, SELECT_EVENT));
  timeline.reset();
  // What the URL asks to see goes first; the rest waits for those answers so it
  // does not compete with them on the server.
  const first = [loadLineage(id, generation), loadEvents(id, generation, seq)];
  if (seq !== null) first.push(openEvent(seq, { push: false }));
  return Promise.allSettled(first).then(() => {
    if (generation === state.generation) return loadSurface(id, generation);
  });
}

async function loadLineage(id, generation) {
  const status = $("lineage-status");
  const view = $("lineage-view");
  status.textContent = "Loading…";
  view.dataset.state = "loading";
  view.replaceChildren();
  try {
    const { data } = await api.request(traceQuery(await knownFeatures()), { id });
    if (generation !== state.generation) return;
    performance.mark("ui:lineage-answer");
    const trace = data.traceSession;
    drawLineage(view, trace, id, (other) => openSession(other));
    lineageZoom.drawn();
    const title = trace.graph.nodes.find((n) => n.id === id)?.title?.title;
    if (title) document.title = `${title} (${id}) · Session viewer`;
    performance.mark("ui:lineage-drawn");
    view.dataset.state = "complete";
    const n = trace.graph.nodes.length;
    status.textContent = trace.complete
      ? `${n} session${n === 1 ? "" : "s"}, ${trace.graph.edges.length} fork${trace.graph.edges.length === 1 ? "" : "s"}`
      : `${n} sessions; parent ${trace.unresolvedParentId} is not in the corpus you can see`;
  } catch (error) {
    if (generation !== state.generation) return;
    if (!handleAuth(error)) status.textContent = message(error);
  }
}

async function fetchAll(query, variables, pick, onPage, generation) {
  let after = null;
  for (;;) {
    const { data } = await api.request(query, { ...variables, first: EVENTS_PAGE, after });
    if (generation !== state.generation) return false;
    const conn = pick(data);
    onPage(conn);
    if (!conn.pageInfo.hasNextPage) return true;
    after = conn.pageInfo.endCursor;
  }
}

// Resolves once the first page is drawn; the other pages keep coming after.
function loadEvents(id, generation, seq) {
  let firstPage;
  const drawn = new Promise((resolve) => {
    firstPage = resolve;
  });
  loadAllEvents(id, generation, seq, firstPage).finally(firstPage);
  return drawn;
}

async function loadAllEvents(id, generation, seq, firstPage) {
  const status = $("timeline-status");
  status.textContent = "Loading…";
  const view = $("timeline-view");
  view.dataset.state = "loading";
  state.eventsLoading = true;
  const events = [];
  let total = 0;
  let live = false;
  let pending = seq;
  try {
    const done = await fetchAll(
      Q_EVENTS,
      { id },
      (data) => {
        live = Boolean(data.session?.live);
        return data.events;
      },
      (conn) => {
        total = conn.totalCount;
        for (const ev of conn.nodes) events.push(ev);
        timeline.setEvents(events);
        view.dataset.count = String(events.length);
        if (pending !== null && pending <= events[events.length - 1]?.seq) {
          timeline.select(pending);
          pending = null;
        }
        status.textContent = events.length < total ? `${events.length} of ${total} events…` : summary(events);
        firstPage();
      },
      generation,
    );
    if (!done) return;
    const pairs = [];
    await fetchAll(
      Q_SHADOWED,
      { id },
      (data) => data.events,
      (conn) => {
        for (const ev of conn.nodes) if (ev.replacedBy) pairs.push([ev.seq, ev.replacedBy.seq]);
      },
      generation,
    );
    if (generation === state.generation) {
      timeline.setReplacements(pairs);
      view.dataset.state = "complete";
      performance.mark("ui:timeline-complete");
      if (live) startTail(id, generation, events, pairs);
    }
  } catch (error) {
    if (generation !== state.generation) return;
    if (!handleAuth(error)) status.textContent = message(error);
  } finally {
    if (generation === state.generation) state.eventsLoading = false;
  }
}

// -- live tail (when the gateway serves the sessionEvents subscription) -----------------

function stopTail() {
  state.tail?.abort();
  state.tail = null;
}

async function startTail(id, generation, events, pairs) {
  stopTail();
  const features = await knownFeatures().catch(() => CURRENT);
  if (!features.tail || generation !== state.generation) return;
  const controller = new AbortController();
  state.tail = controller;
  const view = $("timeline-view");
  const status = $("timeline-status");
  const replaced = new Map(pairs);
  let flushing = null;
  let surfaceTimer = null;
  const flush = () => {
    flushing = null;
    if (controller.signal.aborted) return;
    const atEnd = view.scrollTop + view.clientHeight >= view.scrollHeight - 2;
    timeline.setEvents(events);
    timeline.setReplacements([...replaced]);
    view.dataset.count = String(events.length);
    status.textContent = `● live · ${summary(events)}`;
    if (atEnd) view.scrollTop = view.scrollHeight;
    surfaceTimer ??= setTimeout(() => {
      surfaceTimer = null;
      if (!controller.signal.aborted) loadSurface(id, generation);
    }, 1000);
  };
  const onEvent = (ev) => {
    if (ev.seq !== events.length) return; // already loaded
    events.push(ev);
    for (const { seq } of ev.replacedEvents ?? []) {
      if (events[seq]) events[seq].surface = "SHADOWED";
      replaced.set(seq, ev.seq);
    }
    flushing ??= setTimeout(flush, 100);
  };
  view.dataset.live = "on";
  status.textContent = `● live · ${summary(events)}`;
  try {
    const how = await tail(api, id, events.length - 1, onEvent, controller.signal);
    if (how === "complete" && generation === state.generation) {
      status.textContent = `${summary(events)} · live tail ended (the session left its store)`;
    }
  } catch (error) {
    if (generation === state.generation) status.textContent = `${summary(events)} · live tail stopped: ${message(error)}`;
  } finally {
    if (state.tail === controller) state.tail = null;
    if (generation === state.generation) delete view.dataset.live;
  }
}

function summary(events) {
  const counts = { CURRENT: 0, SHADOWED: 0, LOG_ONLY: 0 };
  for (const ev of events) counts[ev.surface]++;
  return `${events.length} events: ${counts.CURRENT} current, ${counts.SHADOWED} shadowed, ${counts.LOG_ONLY} log-only`;
}

async function loadSurface(id, generation) {
  const list = $("surface-list");
  list.replaceChildren();
  try {
    const { data } = await api.request(Q_SURFACE, { id });
    if (generation !== state.generation || !data.session) return;
    const nodes = data.session.surface;
    const items = nodes.slice(0, SURFACE_SHOWN).map((ev, i) =>
      h(
        "li",
        {},
        h("button", { type: "button", class: "seq-link", "data-seq": ev.seq, "aria-label": `Surface position ${i + 1}: seq ${ev.seq}, ${ev.type}` },
          h("span", { class: "seq" }, ev.seq), " ", h("span", { class: `type ${ev.type.split("/")[0]}` }, ev.type)),
      ),
    );
    if (nodes.length > SURFACE_SHOWN) items.push(h("li", { class: "muted" }, `… ${nodes.length - SURFACE_SHOWN} more`));
    list.replaceChildren(...items);
  } catch (error) {
    if (generation !== state.generation) return;
    if (!handleAuth(error)) list.replaceChildren(h("li", { class: "muted" }, message(error)));
  }
}

// -- one event ------------------------------------------------------------------------

function seqButtons(seqs) {
  if (!seqs || !seqs.length) return [h("span", { class: "muted" }, "—")];
  return seqs.map((seq) => h("button", { type: "button", class: "seq-link", "data-seq": seq }, String(seq)));
}

async function openEvent(seq, { push = true } = {}) {
  const id = state.sessionId;
  if (id === null) return;
  const generation = state.generation;
  state.seq = seq;
  if (push) history.pushState({ session: id, seq }, "", url(id, seq));
  timeline.select(seq);
  const detail = $("event-detail");
  detail.setAttribute("aria-busy", "true");
  delete detail.dataset.seq;
  $("detail-title").textContent = `Event ${seq}`;
  try {
    const [one, around] = await Promise.all([
      api.request(Q_EVENT, { id, seq }),
      api.request(Q_WINDOW, { id, seq }).catch((error) => ({ error })),
    ]);
    if (generation !== state.generation || state.seq !== seq) return;
    const ev = one.data.event;
    if (!ev) {
      detail.replaceChildren(h("p", { class: "warn" }, one.errors.map((e) => e.message).join("; ") || "No such event."));
      return;
    }
    renderEvent(ev, around);
    detail.dataset.seq = String(ev.seq);
  } catch (error) {
    if (generation !== state.generation) return;
    if (!handleAuth(error)) detail.replaceChildren(h("p", { class: "warn" }, message(error)));
  } finally {
    detail.removeAttribute("aria-busy");
  }
}

function renderEvent(ev, around) {
  const op = ev.surfaceOp
    ? ev.surfaceOp.kind === "REPLACE"
      ? `REPLACE ${ev.surfaceOp.start}–${ev.surfaceOp.end}`
      : ev.surfaceOp.kind
    : "none (log-only)";
  const t = ev.trace;
  const rows = [
    ["surfaceOp", [op]],
    ["replaced by", seqButtons(t.replacedBy === null ? [] : [t.replacedBy])],
    ["replacement chain", seqButtons(t.replacementChain)],
    ["replaced", seqButtons(t.replacedEventSeqs)],
    ["sources", seqButtons(t.sourceEventSeqs)],
    ["derived", seqButtons(t.derivedEventSeqs)],
  ];
  const trace = h("dl", { class: "trace" });
  for (const [name, values] of rows) trace.append(h("dt", {}, name), h("dd", {}, ...values));

  let windowPart;
  if (around.error) {
    windowPart = h("p", { class: "muted" }, `Read window unavailable: ${message(around.error)}`);
  } else {
    const w = around.data.readEvent;
    windowPart = h(
      "ol",
      { class: "window", start: w.startSeq },
      ...w.events.map((item) =>
        h(
          "li",
          { class: item.seq === ev.seq ? "here" : null },
          h("button", { type: "button", class: "seq-link", "data-seq": item.seq }, `${item.seq} ${item.type}`),
          " ",
          h("span", { class: `badge lane-${item.surface.toLowerCase().replace("_", "-")}` }, item.surface),
        ),
      ),
    );
    windowPart = h("div", {}, h("h3", {}, `Read window ${w.startSeq}–${w.endSeq}`), windowPart);
  }
  let json = JSON.stringify(ev.data, null, 2);
  const cut = json.length > DATA_SHOWN;
  if (cut) json = json.slice(0, DATA_SHOWN);
  const parts = [
    h("p", { class: "event-head" },
      h("strong", {}, `seq ${ev.seq} · ${ev.type}`), " ",
      h("span", { class: `badge lane-${ev.surface.toLowerCase().replace("_", "-")}` }, ev.surface),
      ev.ignorable ? h("span", { class: "badge" }, "ignorable") : null),
    h("p", { class: "muted" }, when(ev.time)),
    trace,
    windowPart,
    h("h3", {}, "Data"),
    h("pre", { class: "json", tabindex: "0", "aria-label": "Event data (JSON)" }, json),
  ];
  if (cut) parts.push(h("p", { class: "muted" }, `Data cut at ${DATA_SHOWN} characters; GraphiQL shows all of it.`));
  $("event-detail").replaceChildren(...parts);
}

// -- wiring -------------------------------------------------------------------------------

const timeline = new Timeline($("timeline-view"), { onOpen: (seq) => openEvent(seq) });
const lineageZoom = new LineageZoom($("lineage-view"), {
  fit: $("lineage-fit"),
  zoomIn: $("lineage-zoom-in"),
  zoomOut: $("lineage-zoom-out"),
});

const sessionSearch = new SessionSearch(
  api,
  {
    form: $("search-form"),
    input: $("search-input"),
    view: $("search-view"),
    list: $("search-results"),
    status: $("search-status"),
    prev: $("search-prev"),
    next: $("search-next"),
    page: $("search-page"),
    clear: $("search-clear"),
  },
  {
    // A hit in the session already open only moves the selection.
    onOpen: (id, seq) => (id === state.sessionId ? openEvent(seq) : openSession(id, { seq })),
    onAuth: handleAuth,
    onShow: (searching) => {
      $("list-view").hidden = searching;
    },
    // Each search is a history entry, like each session and event opened.
    onSearch: () => history.pushState({}, "", url(state.sessionId, state.seq)),
    features: () => knownFeatures(),
  },
);

const eventSearch = new EventSearch(
  api,
  {
    form: $("event-search-form"),
    input: $("event-search-input"),
    view: $("event-search-view"),
    list: $("event-search-results"),
    status: $("event-search-status"),
    more: $("event-search-more"),
    clear: $("event-search-clear"),
  },
  { onSelect: (seq) => openEvent(seq), onAuth: handleAuth },
);

function setupLinks() {
  for (const panel of [$("event-detail"), $("surface-list")]) {
    panel.addEventListener("click", (event) => {
      const button = event.target.closest("button.seq-link");
      if (button) openEvent(Number(button.dataset.seq));
    });
  }
  $("timeline-refresh").addEventListener("click", () => {
    if (state.sessionId === null) return;
    stopTail();
    const generation = ++state.generation;
    loadEvents(state.sessionId, generation, state.seq);
    loadSurface(state.sessionId, generation);
  });
}

function readUrl() {
  const params = new URLSearchParams(location.search);
  const session = params.get("session");
  const seqText = params.get("seq");
  const seq = seqText !== null && /^\d+$/.test(seqText) ? Number(seqText) : null;
  return { session: session || null, seq, q: (params.get("q") ?? "").trim() };
}

function applyUrl() {
  const { session, seq, q } = readUrl();
  if (q !== sessionSearch.query) sessionSearch.search(q);
  if (session === null) {
    stopTail();
    state.generation++;
    state.sessionId = null;
    state.seq = null;
    markCurrent();
    showNothingSelected();
    return;
  }
  if (session !== state.sessionId) return openSession(session, { push: false, seq });
  else if (seq !== state.seq) {
    if (seq === null) {
      state.seq = null;
      timeline.select(null);
      $("event-detail").replaceChildren(h("p", { class: "empty" }, SELECT_EVENT));
    } else openEvent(seq, { push: false });
  }
}

function start() {
  state.sessionId = null;
  state.features = null;
  const opening = applyUrl();
  Promise.resolve(opening).finally(() => loadSessions());
}

setupSessions();
setupFilters();
setupExport();
setupLinks();
window.addEventListener("popstate", applyUrl);
if (setupAuth()) start();
