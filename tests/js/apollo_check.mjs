// Apollo Client's InMemoryCache against a served gateway, with the README's type policies.
//
//   node --conditions=development apollo_check.mjs SPEC.json
//
// spec: {apollo: path of the README's apollo.js (its GATEWAY_URL already pointed at the
//   server), lineage: path of the README's lineage.js, lineageId, operations: [{name,
//   document, variables}], control: [{name, document, variables}]}
// Runs every operation twice through createClient() (cache-first), then lineageTwice();
// then the control operations through a cache with no type policies. Prints one JSON
// document: {passes: [{requests, data}], lineage: {requests, result}, control: {requests,
// warnings}, warnings: [...], errors: [...]}. Every request any fetch makes is counted.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { isDeepStrictEqual } from "node:util";

const spec = JSON.parse(readFileSync(process.argv[2], "utf-8"));
const out = { passes: [], lineage: null, control: null, warnings: [], errors: [] };

let requests = 0;
const realFetch = globalThis.fetch;
globalThis.fetch = (...args) => {
  requests += 1;
  return realFetch(...args);
};
let sink = out.warnings;
for (const level of ["warn", "error", "log", "info", "debug"]) {
  console[level] = (...args) => sink.push(`${level}: ${args.map(String).join(" ")}`);
}

const { gql, ApolloClient, HttpLink, InMemoryCache } = await import("@apollo/client");
const { loadDevMessages, loadErrorMessages } = await import("@apollo/client/dev");
loadDevMessages();
loadErrorMessages();

async function run(client, operations) {
  const before = requests;
  const data = {};
  for (const op of operations) {
    try {
      const result = await client.query({ query: gql(op.document), variables: op.variables });
      data[op.name] = result.data;
    } catch (error) {
      out.errors.push(`${op.name}: ${error}`);
    }
  }
  return { requests: requests - before, data };
}

try {
  const { createClient } = await import(pathToFileURL(spec.apollo).href);
  const client = createClient();
  out.passes.push(await run(client, spec.operations));
  out.passes.push(await run(client, spec.operations));
  out.passes[1].sameData = isDeepStrictEqual(out.passes[0].data, out.passes[1].data);

  const { lineageTwice } = await import(pathToFileURL(spec.lineage).href);
  const before = requests;
  const result = await lineageTwice(spec.lineageId);
  out.lineage = { requests: requests - before, result };

  // The same questions with no type policies: what the policies are for.
  sink = [];
  const bare = new ApolloClient({
    cache: new InMemoryCache({ possibleTypes: { Node: ["Session", "Event"] } }),
    link: new HttpLink({ uri: spec.url }),
  });
  const control = await run(bare, spec.control);
  out.control = { requests: control.requests, warnings: sink };
} catch (error) {
  out.errors.push(String(error?.stack ?? error));
}
process.stdout.write(JSON.stringify(out));
process.exit(0);
