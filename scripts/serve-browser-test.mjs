// Loads every page of a running `undertext serve` in headless Chromium (Debian's), fails on any
// console error, page error or failed request, and saves a screenshot of each page.
// Usage: node serve-browser-test.mjs BASE_URL OUT_DIR PATH...
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';

const [base, out, ...paths] = process.argv.slice(2);
mkdirSync(out, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--no-first-run', '--disable-quic'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const problems = [];
page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()}`));
let failed = 0;
for (const [i, p] of paths.entries()) {
  problems.length = 0;
  const resp = await page.goto(base + p, { waitUntil: 'load' });
  const status = resp ? resp.status() : 0;
  const name = `${String(i).padStart(2, '0')}-${p.replace(/[^a-z0-9]+/gi, '_').replace(/^_|_$/g, '') || 'chats'}.png`;
  await page.screenshot({ path: `${out}/${name}`, fullPage: false });
  const ok = status === 200 && problems.length === 0;
  if (!ok) failed++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${status} ${p} -> ${out}/${name}${problems.length ? '\n     ' + problems.join('\n     ') : ''}`);
}
await browser.close();
console.log(`${paths.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
