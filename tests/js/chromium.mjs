import { rmSync } from "node:fs";
import { chromium } from "playwright-core";

// How every browser harness here starts Chromium: Debian's build (CHROMIUM_PATH to
// override), headless, with nothing that would call out to the network on its own.
export const EXECUTABLE = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

// The per-step timeout a harness reads from its environment variable (default 30 s).
export function stepTimeoutMs(variable) {
  return Number(process.env[variable] ?? 30000);
}

// Text of GraphiQL's response pane: its CodeMirror 5 editor when there is one. Run in the
// page (`page.evaluate(readResult)`), so it must be self-contained.
export function readResult() {
  const host = document.querySelector(".graphiql-response .CodeMirror");
  const pane = document.querySelector(".graphiql-response");
  return host && host.CodeMirror ? host.CodeMirror.getValue() : pane?.innerText ?? "";
}

// Wait until GraphiQL's response pane contains `expected` (the same reading as readResult,
// repeated because a function passed to the page cannot call another).
export function waitForResult(page, expected, timeout) {
  return page.waitForFunction(
    (text) => {
      const host = document.querySelector(".graphiql-response .CodeMirror");
      const pane = document.querySelector(".graphiql-response");
      const shown = host && host.CodeMirror ? host.CodeMirror.getValue() : pane?.innerText ?? "";
      return shown.includes(text);
    },
    expected,
    { timeout },
  );
}

// End a harness run: print its JSON report (what the Python side reads), close the
// browser, remove the throwaway profile, and exit with `code`.
export async function finish(report, context, userDataDir, code) {
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  await context?.close().catch(() => {});
  rmSync(userDataDir, { recursive: true, force: true });
  process.exit(code);
}

// Start Chromium as every harness here does, on a throwaway profile directory.
export function launch(userDataDir, timeout, viewport = { width: 1280, height: 800 }) {
  return chromium.launchPersistentContext(userDataDir, {
    executablePath: EXECUTABLE,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport,
    timeout,
  });
}
