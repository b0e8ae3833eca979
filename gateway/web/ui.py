"""The viewer page at ``/ui``: sessions, lineage and surface, drawn in the browser.

The page is a static shell: every script and stylesheet is a file under
``STATIC_DIR / "ui"`` (hand-written ES modules, no build step; ``vendor/`` holds
@dagrejs/dagre, vendored by ``scripts/vendor-ui.sh``), and the shell carries no
inline script, inline style or event-handler attribute, so it works under a
``default-src 'self'`` Content-Security-Policy. All data comes from ``/graphql``
on the same origin. The few facts the scripts need from the server (where
GraphQL is, whether it wants a bearer token, where exports are) travel as
``data-`` attributes. Search, filters and titles (SPEC §12-§14) are shown when
the schema has them (the page asks once); no text from the API is ever parsed
as markup (search highlights are ranges, turned into <mark> nodes).
"""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from gateway.core.filters import MAX_TEXT_LENGTH

UI_PATH = "/ui"
UI_STATIC_PREFIX = "/static/ui"
EXPORT_PREFIX = "/sessions"
"""Where `GET /sessions/{id}/export` (SPEC §15) is served; the page builds its links from it."""

_PAGE = """<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <meta name="robots" content="noindex" />
    <title>{title}</title>
    <link rel="icon" href="{static}/favicon.svg" type="image/svg+xml" />
    <link rel="stylesheet" href="{static}/ui.css" />
    <script src="{static}/vendor/dagre.min.js" defer></script>
    <link rel="modulepreload" href="{static}/api.js" />
    <link rel="modulepreload" href="{static}/dom.js" />
    <link rel="modulepreload" href="{static}/features.js" />
    <link rel="modulepreload" href="{static}/filters.js" />
    <link rel="modulepreload" href="{static}/highlight.js" />
    <link rel="modulepreload" href="{static}/search.js" />
    <link rel="modulepreload" href="{static}/export.js" />
    <link rel="modulepreload" href="{static}/lineage.js" />
    <link rel="modulepreload" href="{static}/timeline.js" />
    <link rel="modulepreload" href="{static}/live.js" />
    <script type="module" src="{static}/app.js"></script>
  </head>
  <body data-endpoint="{endpoint}" data-auth="{auth}" data-graphiql="{graphiql}"
        data-export="{export}">
    <header class="bar">
      <h1>Session viewer</h1>
      <nav aria-label="Other pages"><a href="{graphiql}">GraphiQL</a></nav>
      <form id="token-form" class="token" hidden>
        <label for="token-input">Bearer token</label>
        <input id="token-input" type="password" autocomplete="off" spellcheck="false" />
        <button type="submit">Use token</button>
        <button type="button" id="token-forget">Forget</button>
        <span id="token-status" role="status"></span>
      </form>
    </header>
    <main class="layout">
      <section id="sessions" class="panel" aria-labelledby="sessions-title">
        <div class="panel-head">
          <h2 id="sessions-title">Sessions</h2>
          <span id="sessions-count" class="muted"></span>
          <button type="button" id="sessions-refresh"
                  title="Reload this page of sessions">Refresh</button>
        </div>
        <form id="search-form" class="filter search" role="search" hidden>
          <label for="search-input">Search what happened</label>
          <span class="inline">
            <input id="search-input" type="search" maxlength="{max_text}" spellcheck="false"
                   placeholder="a word or phrase, e.g. ECONNREFUSED" />
            <button type="submit">Search</button>
          </span>
        </form>
        <details id="session-filters" class="filters" hidden>
          <summary>Filters <span id="filters-summary" class="muted"></span></summary>
          <form id="filters-form">
            <label for="filter-cwd">Working directory (exact; empty: any)</label>
            <input id="filter-cwd" type="text" spellcheck="false" autocomplete="off" />
            <fieldset>
              <legend>Created (UTC days, inclusive)</legend>
              <label for="filter-from">from</label>
              <input id="filter-from" type="date" />
              <label for="filter-to">to</label>
              <input id="filter-to" type="date" />
            </fieldset>
            <fieldset>
              <legend>Available</legend>
              <label><input id="filter-live" type="checkbox" checked /> live</label>
              <label><input id="filter-persisted" type="checkbox" checked /> persisted</label>
            </fieldset>
            <span class="inline">
              <button type="submit">Apply</button>
              <button type="button" id="filters-reset">Reset</button>
            </span>
            <p id="filters-status" class="muted" role="status"></p>
          </form>
        </details>
        <div id="search-view" class="list-view" hidden>
          <div class="sub-head">
            <span id="search-status" class="muted" role="status"></span>
            <button type="button" id="search-clear">Back to sessions</button>
          </div>
          <ol id="search-results" class="session-list hits"
              aria-label="Sessions by best match"></ol>
          <div class="pager">
            <button type="button" id="search-prev" disabled>&larr; Better</button>
            <span id="search-page" class="muted"></span>
            <button type="button" id="search-next" disabled>More &rarr;</button>
          </div>
        </div>
        <div id="list-view" class="list-view">
          <form id="sessions-filter" class="filter" role="search">
            <label for="filter-input">Filter by id</label>
            <input id="filter-input" type="search"
                   placeholder="part of an id; Enter opens an exact id" />
          </form>
          <ul id="sessions-list" class="session-list" aria-label="Sessions, newest first"></ul>
          <p id="sessions-empty" class="empty" role="status" hidden></p>
          <div class="pager">
            <button type="button" id="sessions-prev" disabled>&larr; Newer</button>
            <span id="sessions-page" class="muted"></span>
            <button type="button" id="sessions-next" disabled>Older &rarr;</button>
          </div>
        </div>
      </section>
      <section id="lineage" class="panel" aria-labelledby="lineage-title">
        <div class="panel-head">
          <h2 id="lineage-title">Lineage</h2>
          <span id="lineage-status" class="muted" role="status"></span>
          <span class="actions">
            <span class="zoom" role="group" aria-label="Zoom the lineage">
              <button type="button" id="lineage-zoom-out" title="Zoom out">&minus;</button>
              <button type="button" id="lineage-fit"
                      title="Fit the whole tree in the pane">Fit</button>
              <button type="button" id="lineage-zoom-in" title="Zoom in">+</button>
            </span>
            <a id="export-session" class="button" hidden
               title="This session as a dsh JSONL artifact">Export</a>
            <a id="export-tree" class="button" hidden
               title="This session and every descendant you can see, as a zip">+ descendants</a>
          </span>
        </div>
        <p id="lineage-empty" class="empty">Select a session in the list (or type its id
          under &ldquo;Filter by id&rdquo; and press Enter) to see its lineage here: the
          sessions it was forked from and every fork of it. Drag to pan; &minus;, Fit and +
          zoom.</p>
        <div id="lineage-view" class="lineage-view" tabindex="-1"></div>
      </section>
      <section id="timeline" class="panel" aria-labelledby="timeline-title">
        <div class="panel-head">
          <h2 id="timeline-title">Surface</h2>
          <span id="timeline-status" class="muted" role="status"></span>
          <button type="button" id="timeline-refresh"
                  title="Reload the events (and what they shadow) now">Refresh</button>
        </div>
        <div class="lanes-head" aria-hidden="true">
          <span>seq</span><span>CURRENT</span><span>SHADOWED</span><span>LOG_ONLY</span>
        </div>
        <p id="timeline-empty" class="empty">Select a session to see its surface here:
          every event by seq in its lane (CURRENT, SHADOWED or LOG_ONLY), and an arrow from
          each replacer to what it shadowed. Then click an event to open it.</p>
        <div id="timeline-view" class="timeline-view" tabindex="0" role="listbox"
             aria-label="Events by seq; arrow keys move, Enter opens"></div>
      </section>
      <aside id="detail" class="panel" aria-labelledby="detail-title">
        <form id="event-search-form" class="filter search" role="search" hidden>
          <label for="event-search-input">Find in this session</label>
          <span class="inline">
            <input id="event-search-input" type="search" maxlength="{max_text}"
                   spellcheck="false" placeholder="a word or phrase" />
            <button type="submit">Find</button>
          </span>
        </form>
        <div id="event-search-view" hidden>
          <div class="sub-head">
            <span id="event-search-status" class="muted" role="status"></span>
            <button type="button" id="event-search-clear">Close</button>
          </div>
          <ol id="event-search-results" class="hits event-hits"
              aria-label="Events of this session by match"></ol>
          <button type="button" id="event-search-more" class="more" hidden>More hits</button>
        </div>
        <div class="panel-head"><h2 id="detail-title">Event</h2></div>
        <div id="event-detail" class="event-detail"><p class="empty">Select a session in the
          list, then an event on its surface, to see the event's data, what it replaced and
          what replaced it.</p></div>
        <div class="panel-head"><h2 id="surface-title">Current surface (model order)</h2></div>
        <ol id="surface-list" class="surface-list" aria-labelledby="surface-title"></ol>
      </aside>
    </main>
  </body>
</html>
"""


def ui_html(
    endpoint: str = "/graphql",
    static_prefix: str = UI_STATIC_PREFIX,
    auth: bool = False,
    graphiql: str = "/graphql",
    export_prefix: str = EXPORT_PREFIX,
    title: str = "Session-query gateway · Viewer",
) -> str:
    """The viewer's HTML shell; ``auth`` makes it ask for a bearer token."""
    return _PAGE.format(
        title=html.escape(title),
        static=html.escape(static_prefix.rstrip("/")),
        endpoint=html.escape(endpoint),
        auth="on" if auth else "off",
        graphiql=html.escape(graphiql),
        export=html.escape(export_prefix.rstrip("/")),
        max_text=MAX_TEXT_LENGTH,
    )


def ui_page(*, auth: bool) -> Callable[[Request], Awaitable[Response]]:
    """The `GET /ui` endpoint: the shell, asking for a token when `auth` is on (the
    access middleware lets a browser's page request through)."""
    page = ui_html(auth=auth)

    async def endpoint(request: Request) -> Response:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    return endpoint
