// urql and graphql-request, as the README sets them up, against a served gateway.
//
//   node clients_check.mjs SPEC.json
//
// spec: {urql: path of the README's urql.js, graphqlRequest: path of its
//   graphql-request.js (both pointed at the server), eventId}
// Prints one JSON document: {urql: {data, error, accept}, graphqlRequest: {data, accept},
// errors}. `accept` is the Accept header each client sent (every fetch is recorded).
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const spec = JSON.parse(readFileSync(process.argv[2], "utf-8"));
const out = { urql: null, graphqlRequest: null, errors: [] };

const sent = [];
const realFetch = globalThis.fetch;
globalThis.fetch = (input, init = {}) => {
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : {}));
  sent.push({ method: init.method ?? "GET", accept: headers.get("accept") });
  return realFetch(input, init);
};

try {
  const urql = await import(pathToFileURL(spec.urql).href);
  const result = await urql.client.query(urql.RECENT, { first: 5 }).toPromise();
  out.urql = { data: result.data ?? null, error: result.error ? String(result.error) : null };
  out.urql.sent = sent.splice(0);

  const request = await import(pathToFileURL(spec.graphqlRequest).href);
  const data = await request.client.request(request.EVENT, { id: spec.eventId });
  out.graphqlRequest = { data, sent: sent.splice(0) };
} catch (error) {
  out.errors.push(String(error?.stack ?? error));
}
process.stdout.write(JSON.stringify(out));
process.exit(0);
