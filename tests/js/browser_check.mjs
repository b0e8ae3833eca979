// Drive the gateway's GraphiQL page in headless Chromium, like a person would.
//
//   node browser_check.mjs URL QUERY EXPECT [SCREENSHOT_PATH]
//
// Opens URL in Debian's Chromium (playwright-core never downloads a browser; set
// CHROMIUM_PATH to use another binary) with a fresh, empty profile, waits for the
// GraphiQL query editor, replaces its contents with QUERY, runs it with the run
// button (Ctrl-Enter as a fallback), waits until the result pane contains EXPECT
// and saves a screenshot. Prints one JSON document on stdout:
//
//   {ok, url, resultText, consoleErrors, failedRequests, httpErrors, screenshot,
//    error, timingsMs}
//
// failedRequests lists every request to a host other than the page's own; such
// requests are aborted, never sent (the gateway must work offline). ok is true when
// the result contained EXPECT and failedRequests is empty; a page that fails (no
// editor, no result, ...) gives ok=false with "error" set. Exits 0 whatever the page
// did; non-zero only when the harness itself crashed (bad usage, no browser, ...).
// BROWSER_CHECK_STEP_TIMEOUT_MS bounds each step (default 30000).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { finish, launch, readResult, stepTimeoutMs, waitForResult } from "./chromium.mjs";

const STEP_TIMEOUT_MS = stepTimeoutMs("BROWSER_CHECK_STEP_TIMEOUT_MS");

const [url, query, expectText, screenshotArg] = process.argv.slice(2);
if (!url || query === undefined || expectText === undefined || process.argv.length > 6) {
  process.stderr.write(
    "usage: node browser_check.mjs URL QUERY EXPECT [SCREENSHOT_PATH]\n",
  );
  process.exit(2);
}
const pageUrl = new URL(url);
const screenshot = screenshotArg ?? join(tmpdir(), `graphiql-check-${process.pid}.png`);

const consoleErrors = [];
const failedRequests = [];
const httpErrors = [];
const timingsMs = {};
const started = Date.now();
const mark = (name) => {
  timingsMs[name] = Date.now() - started;
};

function isOwnHost(requestUrl) {
  let parsed;
  try {
    parsed = new URL(requestUrl);
  } catch {
    return false;
  }
  if (["data:", "blob:", "about:"].includes(parsed.protocol)) return true;
  return parsed.hostname === pageUrl.hostname;
}


const userDataDir = mkdtempSync(join(tmpdir(), "graphiql-check-profile-"));
let context;
const report = {
  ok: false,
  url,
  resultText: "",
  consoleErrors,
  failedRequests,
  httpErrors,
  screenshot: null,
  error: null,
  timingsMs,
};

try {
  // Starting Chromium is not a step of the page: a loaded machine may take seconds.
  context = await launch(userDataDir, Math.max(STEP_TIMEOUT_MS, 30_000));
  mark("launched");

  // Nothing may leave the page's own host: record and abort anything else.
  await context.route("**/*", (route) => {
    const requestUrl = route.request().url();
    if (isOwnHost(requestUrl)) return route.continue();
    failedRequests.push({
      url: requestUrl,
      method: route.request().method(),
      resourceType: route.request().resourceType(),
    });
    return route.abort("blockedbyclient");
  });
  context.on("requestfailed", (request) => {
    if (isOwnHost(request.url())) {
      httpErrors.push({ url: request.url(), failure: request.failure()?.errorText ?? null });
    }
  });
  context.on("response", (response) => {
    if (response.status() >= 400 && isOwnHost(response.url())) {
      httpErrors.push({ url: response.url(), status: response.status() });
    }
  });

  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(STEP_TIMEOUT_MS);
  page.on("console", (message) => {
    if (message.type() === "error") {
      consoleErrors.push({ text: message.text(), location: message.location() });
    }
  });
  page.on("pageerror", (error) => {
    consoleErrors.push({ text: String(error?.stack ?? error), location: null });
  });

  // From here on a failure is the page's, not the harness's: report it (ok=false,
  // error set) and still take the screenshot.
  try {
    await page.goto(url, { waitUntil: "load" });
    mark("loaded");
    const editor = page.locator(".graphiql-query-editor .CodeMirror").first();
    try {
      await editor.waitFor({ state: "visible" });
    } catch (error) {
      throw new Error(`GraphiQL query editor never appeared: ${error.message}`);
    }
    mark("editorVisible");

    // Replace the query through CodeMirror itself (typing would trigger the
    // editor's auto-closing brackets); fall back to the keyboard otherwise.
    const replaced = await page.evaluate((text) => {
      const host = document.querySelector(".graphiql-query-editor .CodeMirror");
      if (!host || !host.CodeMirror) return false;
      host.CodeMirror.setValue(text);
      host.CodeMirror.focus();
      return true;
    }, query);
    if (!replaced) {
      await editor.click();
      await page.keyboard.press("ControlOrMeta+A");
      await page.keyboard.press("Delete");
      await page.keyboard.insertText(query);
    }

    const runButton = page.locator("button.graphiql-execute-button").first();
    if (await runButton.isVisible()) {
      await runButton.click();
    } else {
      await editor.click();
      await page.keyboard.press("Control+Enter");
    }
    mark("executed");

    try {
      await waitForResult(page, expectText, STEP_TIMEOUT_MS);
      mark("resultSeen");
    } catch (error) {
      throw new Error(`result pane never contained ${JSON.stringify(expectText)}: ${error.message}`);
    }
  } catch (error) {
    report.error = String(error?.message ?? error);
  }
  report.resultText = await page.evaluate(readResult).catch(() => "");

  await page.screenshot({ path: screenshot, fullPage: false });
  report.screenshot = screenshot;
  mark("screenshot");

  report.ok =
    report.error === null &&
    report.resultText.includes(expectText) &&
    failedRequests.length === 0;
} catch (error) {
  report.error = String(error?.stack ?? error);
  await finish(report, context, userDataDir, 1);
}
await finish(report, context, userDataDir, 0);
