// Run the graphql-http server audit (GraphQL over HTTP spec) against a URL.
//
//   node audit.mjs URL
//
// Prints one JSON document on stdout:
//   {url, total, ok: <count>, warn: [...], error: [...], notice: [...]}
// where each failing audit is {id, name, reason, httpStatus, contentType, body}
// ("warn" = failed SHOULD, "error" = failed MUST, "notice" = failed MAY).
// Exits 0 whatever the audit found; non-zero only when the harness itself
// crashed (bad usage, server unreachable, timeout, ...).
import { auditServer } from "graphql-http";

const REQUEST_TIMEOUT_MS = Number(process.env.AUDIT_REQUEST_TIMEOUT_MS ?? 15000);
const BODY_LIMIT = 500;

function usage(message) {
  process.stderr.write(`audit.mjs: ${message}\nusage: node audit.mjs URL\n`);
  process.exit(2);
}

const url = process.argv[2];
if (!url || process.argv.length > 3) usage("expected exactly one argument");
try {
  new URL(url);
} catch {
  usage(`not a URL: ${url}`);
}

// Every request the audit makes is bounded in time.
const fetchFn = (input, init = {}) =>
  fetch(input, { ...init, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });

async function describeResponse(response) {
  if (!response) return {};
  const out = { httpStatus: response.status, contentType: response.headers.get("content-type") };
  try {
    const text = await response.clone().text();
    out.body = text.length > BODY_LIMIT ? `${text.slice(0, BODY_LIMIT)}...` : text;
  } catch {
    out.body = null; // body already consumed by the audit
  }
  return out;
}

const results = await auditServer({ url, fetchFn });

const report = { url, total: results.length, ok: 0, warn: [], error: [], notice: [] };
for (const result of results) {
  if (result.status === "ok") {
    report.ok += 1;
    continue;
  }
  const entry = {
    id: result.id,
    name: result.name,
    reason: result.reason,
    ...(await describeResponse(result.response)),
  };
  (report[result.status] ?? report.error).push(entry);
}

process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
