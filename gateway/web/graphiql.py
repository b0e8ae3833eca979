"""An offline GraphiQL page: every script and stylesheet comes from the gateway itself.

The assets under ``STATIC_DIR / "graphiql"`` are vendored by
``scripts/vendor-graphiql.sh`` (GraphiQL 3.x UMD bundle + React 18 UMD builds, and
the graphql-ws browser client; see ``VERSIONS.txt`` there). Serve ``STATIC_DIR``
at ``/static`` and hand :func:`graphiql_html` to the GraphQL view's IDE hook.

Queries are POSTed; subscriptions go over graphql-transport-ws to the same
endpoint (``ws(s)://``), with the ``Authorization`` header of GraphiQL's header
editor sent in ``connection_init``.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

STATIC_DIR: Path = Path(__file__).resolve().parent / "static"
"""Directory to serve as static files; the vendored assets live in its ``graphiql/``."""

ACCEPT = "application/graphql-response+json, application/json"

# Files loaded by the page, in order, relative to ``static_prefix``.
_STYLESHEETS = ("graphiql.min.css",)
_SCRIPTS = (
    "react.production.min.js",
    "react-dom.production.min.js",
    "graphiql.min.js",
    "graphql-ws.min.js",
)

_PAGE = """<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <meta name="robots" content="noindex" />
    <title>{title}</title>
    <link rel="icon" href="data:," />
{stylesheets}
    <style>
      html, body {{ height: 100%; margin: 0; width: 100%; overflow: hidden; }}
      body {{ display: flex; flex-direction: column; }}
      #graphiql {{ flex: 1; min-height: 0; display: flex; }}
      .gateway-token {{
        display: flex; align-items: center; gap: 0.5em; padding: 0.4em 0.8em;
        font: 14px system-ui, sans-serif; border-bottom: 1px solid #d0d4da;
      }}
      .gateway-token input {{ flex: 0 1 28em; font: inherit; padding: 0.2em 0.4em; }}
      .gateway-token input[aria-invalid="true"] {{ outline: 2px solid #c62828; }}
      #graphiql > .graphiql-loading {{ margin: auto; font-family: system-ui, sans-serif; }}
      .viewer-link {{ position: fixed; right: 12px; bottom: 8px; z-index: 10;
        font: 13px system-ui, sans-serif; }}
    </style>
  </head>
  <body>
{token_field}
    <div id="graphiql"><p class="graphiql-loading">Loading GraphiQL&hellip;</p></div>
{viewer}
{scripts}
    <script id="graphiql-config" type="application/json">{config}</script>
    <script>
      (function () {{
        "use strict";
        var mount = document.getElementById("graphiql");
        var config = JSON.parse(document.getElementById("graphiql-config").textContent);
        if (
          typeof window.GraphiQL === "undefined" ||
          typeof window.React === "undefined" ||
          typeof window.ReactDOM === "undefined"
        ) {{
          mount.textContent =
            "GraphiQL could not load its assets from " + config.staticPrefix + "/.";
          return;
        }}

        // With auth on, a token field above GraphiQL: the token lives in this tab's
        // sessionStorage only (never localStorage, never a cookie) and goes out as
        // `Authorization: Bearer ...`; a header set in GraphiQL's own editor wins.
        var tokenInput = document.getElementById("gateway-token-input");
        var TOKEN_KEY = "session-gateway.token";
        function currentToken() {{
          return tokenInput ? tokenInput.value.trim() : "";
        }}
        if (tokenInput) {{
          try {{
            tokenInput.value = window.sessionStorage.getItem(TOKEN_KEY) || "";
          }} catch (err) {{}}
          tokenInput.addEventListener("input", function () {{
            tokenInput.removeAttribute("aria-invalid");
            try {{
              if (currentToken()) {{
                window.sessionStorage.setItem(TOKEN_KEY, currentToken());
              }} else {{
                window.sessionStorage.removeItem(TOKEN_KEY);
              }}
            }} catch (err) {{}}
          }});
          // A new token (Enter, or leaving the field) re-reads the schema with it.
          tokenInput.addEventListener("change", function () {{
            render();
          }});
          document.getElementById("gateway-token").addEventListener("submit", function (e) {{
            e.preventDefault();
            render();
          }});
        }}

        function isSubscription(params) {{
          // Read the operation type from the text sent (GraphiQL's documentAST can lag
          // an edit by a moment): the named operation's keyword, else the first one.
          var text = (params.query || "").replace(/#[^\\n\\r]*/g, "");
          var name = params.operationName;
          if (name) {{
            var named = new RegExp("\\\\b(query|mutation|subscription)\\\\s+" + name + "\\\\b");
            var found = named.exec(text);
            if (found) return found[1] === "subscription";
          }}
          var first = /\\b(query|mutation|subscription)\\b|\\{{/.exec(text);
          return !!first && first[1] === "subscription";
        }}

        function subscribe(params, opts) {{
          // graphql-transport-ws on the same endpoint; Authorization goes in connection_init.
          var url = new URL(config.endpoint, window.location.href);
          url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
          var extra = (opts && opts.headers) || {{}};
          var auth =
            extra.Authorization ||
            extra.authorization ||
            (currentToken() ? "Bearer " + currentToken() : "");
          return {{
            subscribe: function (observer) {{
              var client = window.graphqlWs.createClient({{
                url: url.toString(),
                connectionParams: auth ? {{ authorization: String(auth) }} : {{}},
                retryAttempts: 0,
              }});
              var done = false;
              function end() {{
                if (!done) {{ done = true; client.dispose(); }}
              }}
              var stop = client.subscribe(params, {{
                next: function (value) {{ observer.next(value); }},
                error: function (err) {{
                  var why = err && (err.reason || err.code);
                  observer.error(
                    Array.isArray(err)
                      ? {{ errors: err }}
                      : {{ errors: [{{ message: "WebSocket closed: " + (why || err) }}] }}
                  );
                  end();
                }},
                complete: function () {{ observer.complete(); end(); }},
              }});
              return {{ unsubscribe: function () {{ stop(); end(); }} }};
            }},
          }};
        }}

        function fetcher(params, opts) {{
          if (typeof window.graphqlWs !== "undefined" && isSubscription(params)) {{
            return subscribe(params, opts);
          }}
          var headers = new Headers({{
            "Content-Type": "application/json",
            Accept: config.accept,
          }});
          if (currentToken()) {{
            headers.set("Authorization", "Bearer " + currentToken());
          }}
          var extra = (opts && opts.headers) || {{}};
          Object.keys(extra).forEach(function (name) {{
            headers.set(name, String(extra[name]));
          }});
          return fetch(config.endpoint, {{
            method: "POST",
            headers: headers,
            body: JSON.stringify(params),
            credentials: "same-origin",
          }}).then(function (response) {{
            if (tokenInput && response.status === 401) {{
              tokenInput.setAttribute("aria-invalid", "true");
            }}
            return response.text().then(function (text) {{
              try {{
                return JSON.parse(text);
              }} catch (err) {{
                return {{
                  errors: [
                    {{
                      message:
                        "HTTP " + response.status + " " + response.statusText +
                        " (not a JSON body): " + text.slice(0, 2000),
                    }},
                  ],
                }};
              }}
            }});
          }});
        }}

        var root = ReactDOM.createRoot(mount);
        var renderedToken = null;
        function render() {{
          if (renderedToken === currentToken()) {{
            return;
          }}
          renderedToken = currentToken();
          // A fresh fetcher for a new token: GraphiQL refetches the schema with it.
          var props = {{
            fetcher: function (params, opts) {{
              return fetcher(params, opts);
            }},
          }};
          if (config.defaultQuery !== null) {{
            props.defaultQuery = config.defaultQuery;
          }}
          root.render(React.createElement(GraphiQL, props));
        }}
        render();
      }})();
    </script>
  </body>
</html>
"""


def _script_json(value: object) -> str:
    """JSON that is safe inside a ``<script>`` element (no ``</script>`` breakout)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


_TOKEN_FIELD = """\
    <form id="gateway-token" class="gateway-token" autocomplete="off">
      <label for="gateway-token-input">Bearer token</label>
      <input id="gateway-token-input" name="token" type="password" autocomplete="off"
        spellcheck="false" placeholder="paste a token (kept in this tab only)" />
    </form>"""


def graphiql_html(
    endpoint: str = "/graphql",
    static_prefix: str = "/static/graphiql",
    title: str = "Session-query gateway",
    default_query: str | None = None,
    token_field: bool = False,
    viewer_href: str | None = "/ui",
) -> str:
    """Return a complete GraphiQL page that loads every asset from ``static_prefix``.

    ``endpoint`` is where the page POSTs its operations (JSON body, ``Accept:
    application/graphql-response+json, application/json``); ``default_query`` is
    shown in the editor of a browser that has no saved GraphiQL tabs yet.
    ``token_field`` (auth on) adds a labelled password field whose value is sent
    as ``Authorization: Bearer ...`` and kept in the tab's sessionStorage only.
    ``viewer_href`` (None: no link) links the viewer page (``gateway.web.ui``).
    """
    prefix = static_prefix.rstrip("/")
    stylesheets = "\n".join(
        f'    <link rel="stylesheet" href="{html.escape(f"{prefix}/{name}")}" />'
        for name in _STYLESHEETS
    )
    scripts = "\n".join(
        f'    <script src="{html.escape(f"{prefix}/{name}")}"></script>' for name in _SCRIPTS
    )
    config = _script_json(
        {
            "endpoint": endpoint,
            "staticPrefix": prefix,
            "accept": ACCEPT,
            "defaultQuery": default_query,
        }
    )
    return _PAGE.format(
        title=html.escape(title),
        stylesheets=stylesheets,
        scripts=scripts,
        config=config,
        token_field=_TOKEN_FIELD if token_field else "",
        viewer=(
            f'    <a class="viewer-link" href="{html.escape(viewer_href)}">Viewer: sessions, '
            "lineage, surface</a>"
            if viewer_href
            else ""
        ),
    )
