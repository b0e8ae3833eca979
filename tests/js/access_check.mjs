// Browser checks of the gateway's access features, in headless Chromium (Debian's).
//
//   node access_check.mjs fetch PAGE_URL PLAN_JSON
//     Opens PAGE_URL (a page served from another origin than the gateway) and runs
//     each request of PLAN_JSON ([{url, method, headers, body}]) with fetch() from
//     that page, as a frontend would. Prints {ok, origin, results: [{status, body,
//     headers: {name: value} for the exposed headers asked for, error}], consoleErrors}.
//     A request the browser's CORS check blocks has status null and error set.
//
//   node access_check.mjs graphiql URL TOKEN QUERY EXPECT SCREENSHOT
//     Opens GraphiQL at URL, runs QUERY with no token (records what the result pane
//     shows), types TOKEN into the page's token field, runs QUERY again and waits
//     for EXPECT. Prints {ok, field: {type}, withoutToken, resultText,
//     authorizationHeaders, posts: [{authorization, introspection}], sessionStorage,
//     localStorage, consoleErrors, error}.
//
// Exits 0 whatever the page did; non-zero only when the harness itself crashed.
// ACCESS_CHECK_STEP_TIMEOUT_MS bounds each step (default 30000).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { launch, readResult, stepTimeoutMs, waitForResult } from "./chromium.mjs";

const STEP_TIMEOUT_MS = stepTimeoutMs("ACCESS_CHECK_STEP_TIMEOUT_MS");

const [mode, ...rest] = process.argv.slice(2);
const report = { ok: false, consoleErrors: [], error: null };

function isLoopback(requestUrl) {
  try {
    const { protocol, hostname } = new URL(requestUrl);
    if (["data:", "blob:", "about:"].includes(protocol)) return true;
    return hostname === "127.0.0.1" || hostname === "localhost" || hostname === "[::1]";
  } catch {
    return false;
  }
}

async function withPage(run) {
  const userDataDir = mkdtempSync(join(tmpdir(), "access-check-profile-"));
  let context;
  try {
    context = await launch(userDataDir, STEP_TIMEOUT_MS);
    // Nothing leaves this machine.
    await context.route("**/*", (route) =>
      isLoopback(route.request().url()) ? route.continue() : route.abort("blockedbyclient"),
    );
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(STEP_TIMEOUT_MS);
    page.on("console", (message) => {
      if (message.type() === "error") report.consoleErrors.push(message.text());
    });
    page.on("pageerror", (error) => report.consoleErrors.push(String(error?.stack ?? error)));
    try {
      await run(page, context);
    } catch (error) {
      report.error = String(error?.message ?? error);
    }
  } finally {
    await context?.close().catch(() => {});
    rmSync(userDataDir, { recursive: true, force: true });
  }
}

async function fetchMode(pageUrl, planJson) {
  const plan = JSON.parse(planJson);
  await withPage(async (page) => {
    await page.goto(pageUrl, { waitUntil: "load" });
    report.origin = await page.evaluate(() => window.location.origin);
    report.results = await page.evaluate(async (requests) => {
      const out = [];
      for (const r of requests) {
        try {
          const response = await fetch(r.url, {
            method: r.method ?? "POST",
            headers: r.headers ?? {},
            body: r.body === undefined ? undefined : JSON.stringify(r.body),
            mode: "cors",
          });
          const headers = {};
          for (const name of r.readHeaders ?? []) headers[name] = response.headers.get(name);
          out.push({ status: response.status, body: await response.text(), headers, error: null });
        } catch (error) {
          out.push({ status: null, body: null, headers: {}, error: String(error) });
        }
      }
      return out;
    }, plan);
    report.ok = true;
  });
}


async function runQuery(page, query, expectText) {
  await page.evaluate((text) => {
    const host = document.querySelector(".graphiql-query-editor .CodeMirror");
    host.CodeMirror.setValue(text);
  }, query);
  // Clear the previous answer so the wait below sees the new one.
  await page.evaluate(() => {
    const host = document.querySelector(".graphiql-response .CodeMirror");
    if (host && host.CodeMirror) host.CodeMirror.setValue("");
  });
  await page.locator("button.graphiql-execute-button").first().click();
  await waitForResult(page, expectText, STEP_TIMEOUT_MS);
  return page.evaluate(readResult);
}

async function graphiqlMode(url, token, query, expectText, screenshot) {
  report.authorizationHeaders = [];
  report.posts = [];
  await withPage(async (page, context) => {
    context.on("request", (request) => {
      if (request.method() === "POST") {
        report.authorizationHeaders.push(request.headers()["authorization"] ?? null);
        report.posts.push({
          authorization: request.headers()["authorization"] ?? null,
          introspection: (request.postData() ?? "").includes("__schema"),
        });
      }
    });
    await page.goto(url, { waitUntil: "load" });
    await page.locator(".graphiql-query-editor .CodeMirror").first().waitFor({ state: "visible" });
    const field = page.getByLabel("Bearer token");
    report.field = { type: await field.getAttribute("type") };
    try {
      report.withoutToken = await runQuery(page, query, "UNAUTHENTICATED");
    } catch (error) {
      report.withoutToken = `never showed UNAUTHENTICATED: ${await page.evaluate(readResult)}`;
    }
    await field.fill(token);
    await field.press("Enter");
    await page.locator(".graphiql-query-editor .CodeMirror").first().waitFor({ state: "visible" });
    try {
      report.resultText = await runQuery(page, query, expectText);
    } catch (error) {
      report.resultText = await page.evaluate(readResult);
      throw new Error(`result pane never contained ${JSON.stringify(expectText)}`);
    }
    report.sessionStorage = await page.evaluate(() => ({ ...window.sessionStorage }));
    report.localStorage = await page.evaluate(() => ({ ...window.localStorage }));
    await page.screenshot({ path: screenshot, fullPage: false });
    report.screenshot = screenshot;
    report.ok = true;
  });
}

try {
  if (mode === "fetch" && rest.length === 2) {
    await fetchMode(...rest);
  } else if (mode === "graphiql" && rest.length === 5) {
    await graphiqlMode(...rest);
  } else {
    process.stderr.write(
      "usage: node access_check.mjs fetch PAGE_URL PLAN_JSON\n" +
        "       node access_check.mjs graphiql URL TOKEN QUERY EXPECT SCREENSHOT\n",
    );
    process.exit(2);
  }
} catch (error) {
  report.error = String(error?.stack ?? error);
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  process.exit(1);
}
process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
