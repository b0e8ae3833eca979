// Subscribe to the gateway with the real `graphql-ws` client (graphql-transport-ws).
//
//   node subscribe.mjs '<json spec>'
//
// spec: {url, query, variables?, connectionParams?, headers?, stopAfter?, timeoutMs?}
//   stopAfter: leave (dispose the subscription) after this many results.
// Prints one JSON document on stdout:
//   {results: [...], completed: bool, error: null | {...}, closeCode: int | null}
// `completed` is true when the server completed the subscription; `error` is what the
// client's sink got (an array of GraphQL errors, or a close event as {code, reason}).
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const spec = JSON.parse(process.argv[2] ?? "{}");
const out = { results: [], completed: false, error: null, closeCode: null };

class HeaderedWebSocket extends WebSocket {
  constructor(address, protocols) {
    super(address, protocols, { headers: spec.headers ?? {} });
  }
}

const client = createClient({
  url: spec.url,
  webSocketImpl: HeaderedWebSocket,
  connectionParams: spec.connectionParams,
  lazy: true,
  retryAttempts: 0,
  on: {
    closed: (event) => {
      if (event && typeof event.code === "number") out.closeCode = event.code;
    },
  },
});

const timer = setTimeout(() => {
  out.error = { timeout: true };
  finish();
}, spec.timeoutMs ?? 30000);

let done = false;
let unsubscribe = () => {};
function finish() {
  if (done) return;
  done = true;
  clearTimeout(timer);
  unsubscribe();
  client.dispose();
  // exit only once stdout is flushed (a large result would be cut short otherwise)
  process.stdout.write(JSON.stringify(out), () => process.exit(0));
}

unsubscribe = client.subscribe(
  { query: spec.query, variables: spec.variables ?? {} },
  {
    next: (result) => {
      out.results.push(result);
      if (spec.stopAfter && out.results.length >= spec.stopAfter) finish();
    },
    error: (err) => {
      out.error = Array.isArray(err)
        ? err
        : { code: err?.code ?? null, reason: err?.reason ?? String(err) };
      finish();
    },
    complete: () => {
      out.completed = true;
      finish();
    },
  },
);
