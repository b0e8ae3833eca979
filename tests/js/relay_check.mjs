// A compiled Relay app (the README's environment and fragments) against a served gateway.
//
//   node relay_check.mjs SPEC.json
//
// spec: {app: directory holding src/environment.js and relay-compiler's artifacts in
//   src/__generated__, url: the gateway's /graphql, sessionId}
// Fetches SessionScreenQuery, reads the SessionCard_session and EventRow_event fragments,
// refetches each through its @refetchable query (`node(id:)`) and reads them again. Then
// the same query through an environment without the README's getDataID (the control).
// Prints one JSON document: {screen, card, cardAgain, event, eventAgain, refetchTexts,
// requests, warnings, control: {warnings}, errors}.
import { readFileSync } from "node:fs";
import { register } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

// relay-compiler's artifacts are ES modules that import each other as a bundler would,
// without the extension ("./X.graphql" for X.graphql.js): resolve those the same way.
register(
  "data:text/javascript," +
    encodeURIComponent(`export async function resolve(specifier, context, next) {
      return next(specifier.endsWith(".graphql") ? specifier + ".js" : specifier, context);
    }`),
);

const spec = JSON.parse(readFileSync(process.argv[2], "utf-8"));
const out = { requests: 0, warnings: [], control: null, errors: [] };

const realFetch = globalThis.fetch;
globalThis.fetch = (...args) => {
  out.requests += 1;
  return realFetch(...args);
};
let sink = out.warnings;
for (const level of ["warn", "error", "log", "info", "debug"]) {
  console[level] = (...args) => sink.push(`${level}: ${args.map(String).join(" ")}`);
}

const relay = await import("relay-runtime");
const { createOperationDescriptor, fetchQuery, getSelector } = relay;
const artifact = async (name) =>
  (await import(pathToFileURL(join(spec.app, "src", "__generated__", `${name}.graphql.js`)).href))
    .default;

function read(environment, fragment, ref) {
  const snapshot = environment.lookup(getSelector(fragment, ref));
  if (snapshot.isMissingData) throw new Error(`missing data reading ${fragment.name}`);
  return snapshot.data;
}

async function query(environment, node, variables) {
  await fetchQuery(environment, node, variables).toPromise();
  const snapshot = environment.lookup(createOperationDescriptor(node, variables).fragment);
  if (snapshot.isMissingData) throw new Error(`missing data reading ${node.params.name}`);
  return snapshot.data;
}

try {
  const { createEnvironment } = await import(
    pathToFileURL(join(spec.app, "src", "environment.js")).href
  );
  const Screen = await artifact("SessionScreenQuery");
  const Card = await artifact("SessionCard_session");
  const Row = await artifact("EventRow_event");
  const CardRefetch = await artifact("SessionCardRefetchQuery");
  const RowRefetch = await artifact("EventRowRefetchQuery");
  out.refetchTexts = [CardRefetch.params.text, RowRefetch.params.text];

  const environment = createEnvironment();
  const screen = await query(environment, Screen, { id: spec.sessionId });
  out.screen = screen;
  out.card = read(environment, Card, screen.session);
  out.event = read(environment, Row, screen.session.event);

  const refetched = await query(environment, CardRefetch, { id: out.card.id });
  out.cardAgain = read(environment, Card, refetched.node);
  const refetchedRow = await query(environment, RowRefetch, { id: out.event.id });
  out.eventAgain = read(environment, Row, refetchedRow.node);

  // The control: Relay's default getDataID files the header under its session's id.
  sink = [];
  const bare = new relay.Environment({
    network: relay.Network.create(async (params, variables) => {
      const response = await realFetch(spec.url, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ query: params.text, variables }),
      });
      return response.json();
    }),
    store: new relay.Store(new relay.RecordSource()),
  });
  await query(bare, Screen, { id: spec.sessionId });
  out.control = { warnings: sink };
} catch (error) {
  out.errors.push(String(error?.stack ?? error));
}
process.stdout.write(JSON.stringify(out));
process.exit(0);
