/**
 * Debian's Chromium for browser checks (the console's browser test, `npm run check:docs`): where it
 * is, and the flags it needs on a closed network and as root (CI machines, containers).
 */
export const CHROMIUM = process.env["CHROMIUM"] ?? "/usr/bin/chromium"

export const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync"
]
