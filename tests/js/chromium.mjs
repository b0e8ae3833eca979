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
