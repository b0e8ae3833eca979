// Drive the gateway's viewer page (/ui) in headless Chromium through a scenario.
//
//   node ui_check.mjs SCENARIO_JSON_PATH
//
// The scenario is {"base": URL, "steps": [...]}; each step is one of
//   {"goto": PATH}                          navigate (relative to base), wait for "load"
//   {"waitFor": SELECTOR, "state"?: ...}    wait for an element (default: attached)
//   {"waitForFunction": JS_EXPRESSION}      wait until the expression is truthy
//   {"click": SELECTOR}  {"fill": [SELECTOR, TEXT]}  {"press": KEY}  {"focus": SELECTOR}
//   {"eval": JS_EXPRESSION, "as": NAME}     store the (awaited) value under results[NAME]
//   {"screenshot": PATH, "selector"?: SELECTOR}
//   {"back": true}                          history back, wait for the URL to change
//   {"download": SELECTOR, "saveAs": PATH, "as"?: NAME}
//                                           click, wait for the download it starts, save
//                                           it to PATH; results[NAME] = {filename, url}
// Prints one JSON document: {ok, results, consoleErrors, requests, offOrigin,
// httpErrors, error, step}. Every request the page makes is recorded in
// `requests`; those to another origin are aborted and listed in `offOrigin`.
// Exits 0 whatever the page did; non-zero only when the harness itself crashed.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { finish, launch, stepTimeoutMs } from "./chromium.mjs";

const STEP_TIMEOUT_MS = stepTimeoutMs("BROWSER_CHECK_STEP_TIMEOUT_MS");

const [scenarioPath] = process.argv.slice(2);
if (!scenarioPath) {
  process.stderr.write("usage: node ui_check.mjs SCENARIO_JSON_PATH\n");
  process.exit(2);
}
const scenario = JSON.parse(readFileSync(scenarioPath, "utf8"));
const origin = new URL(scenario.base).origin;
const report = {
  ok: false,
  results: {},
  consoleErrors: [],
  requests: [],
  offOrigin: [],
  httpErrors: [],
  error: null,
  step: null,
};

function ownOrigin(requestUrl) {
  try {
    const parsed = new URL(requestUrl);
    if (["data:", "blob:", "about:"].includes(parsed.protocol)) return true;
    return parsed.origin === origin;
  } catch {
    return false;
  }
}

const userDataDir = mkdtempSync(join(tmpdir(), "ui-check-profile-"));
let context;
try {
  context = await launch(userDataDir, STEP_TIMEOUT_MS, { width: scenario.width ?? 1280, height: scenario.height ?? 800 });
  await context.route("**/*", (route) => {
    const request = route.request();
    report.requests.push({ url: request.url(), method: request.method(), type: request.resourceType() });
    if (ownOrigin(request.url())) return route.continue();
    report.offOrigin.push(request.url());
    return route.abort("blockedbyclient");
  });
  context.on("response", (response) => {
    if (response.status() >= 400 && ownOrigin(response.url())) {
      report.httpErrors.push({ url: response.url(), status: response.status() });
    }
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(STEP_TIMEOUT_MS);
  page.on("console", (message) => {
    if (message.type() === "error") report.consoleErrors.push(message.text());
  });
  page.on("pageerror", (error) => report.consoleErrors.push(String(error?.stack ?? error)));

  try {
    for (const [index, step] of scenario.steps.entries()) {
      report.step = index;
      if ("goto" in step) {
        await page.goto(new URL(step.goto, scenario.base).href, { waitUntil: "load" });
      } else if ("waitFor" in step) {
        await page.locator(step.waitFor).first().waitFor({ state: step.state ?? "attached" });
      } else if ("waitForFunction" in step) {
        // Polled from here with page.evaluate (a DevTools evaluation): Playwright's own
        // waitForFunction evals the string inside the page, which the gateway's
        // Content-Security-Policy (no 'unsafe-eval') rightly refuses.
        const deadline = Date.now() + STEP_TIMEOUT_MS;
        while (!(await page.evaluate(step.waitForFunction))) {
          if (Date.now() > deadline) {
            throw new Error(`timed out waiting for ${step.waitForFunction}`);
          }
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      } else if ("click" in step) {
        await page.locator(step.click).first().click();
      } else if ("fill" in step) {
        await page.locator(step.fill[0]).first().fill(step.fill[1]);
      } else if ("press" in step) {
        await page.keyboard.press(step.press);
      } else if ("focus" in step) {
        await page.locator(step.focus).first().focus();
      } else if ("eval" in step) {
        report.results[step.as] = await page.evaluate(step.eval);
      } else if ("screenshot" in step) {
        const target = step.selector ? page.locator(step.selector).first() : page;
        await target.screenshot({ path: step.screenshot });
      } else if ("download" in step) {
        const [download] = await Promise.all([
          page.waitForEvent("download"),
          page.locator(step.download).first().click(),
        ]);
        await download.saveAs(step.saveAs);
        const failure = await download.failure();
        if (failure) throw new Error(`download failed: ${failure}`);
        report.results[step.as ?? "download"] = { filename: download.suggestedFilename(), url: download.url() };
      } else if ("back" in step) {
        const before = page.url();
        await page.goBack();
        await page.waitForFunction((u) => location.href !== u, before);
      } else {
        throw new Error(`unknown step ${JSON.stringify(step)}`);
      }
    }
    report.step = null;
  } catch (error) {
    report.error = String(error?.message ?? error);
  }
  report.ok = report.error === null && report.offOrigin.length === 0;
} catch (error) {
  report.error = String(error?.stack ?? error);
  await finish(report, context, userDataDir, 1);
}
await finish(report, context, userDataDir, 0);
