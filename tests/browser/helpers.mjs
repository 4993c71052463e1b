/* Shared pieces of the browser tests: Debian's chromium through playwright-core, plain HTTP
 * requests (one connection each, closed after, so the server's fd count is not blurred by
 * keep-alive pools), /proc readings, a WAV writer, multipart bodies, ffmpeg decoding, and the
 * mouth-motion sampler that runs in the page. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
export const CHROMIUM_ARGS = [
  '--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--autoplay-policy=no-user-gesture-required', '--use-fake-ui-for-media-stream',
  '--use-fake-device-for-media-stream', '--disable-features=WebRtcHideLocalIpsWithMdns',
];

/* extraArgs: more Chromium switches (a fake microphone file: --use-file-for-fake-audio-capture). */
export async function launchBrowser(extraArgs = []) {
  return chromium.launch({ executablePath: CHROMIUM, args: [...CHROMIUM_ARGS, ...extraArgs], headless: true });
}

/* A fresh context (its own connection pool and permissions) with the page loaded and window.fc
 * ready (query: the page's options, e.g. '?relay=1'). Page errors and console errors are
 * collected in page.fcErrors. */
export async function openPage(browser, url, query = '') {
  const context = await browser.newContext({ permissions: ['microphone'], viewport: { width: 1100, height: 800 } });
  const page = await context.newPage();
  page.fcErrors = [];
  page.on('pageerror', (e) => page.fcErrors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') page.fcErrors.push(`console: ${m.text()}`); });
  await page.goto(`${url}/${query}`);
  await page.waitForFunction(() => window.fc && window.fc.state, null, { timeout: 10000 });
  return page;
}

/* ---- HTTP --------------------------------------------------------------------------------- */

/* One request on its own connection. Resolves with {status, headers, body: Buffer, text(),
 * json()}; never rejects on an HTTP error status. */
export function request(method, url, { json, body, headers = {}, timeoutMs = 30000 } = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    let data = body;
    if (json !== undefined) {
      data = Buffer.from(JSON.stringify(json));
      h['Content-Type'] = 'application/json';
    }
    if (data !== undefined) h['Content-Length'] = Buffer.byteLength(data);
    const req = http.request(url, { method, headers: h, agent: false, timeout: timeoutMs }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const buf = Buffer.concat(chunks);
        resolve({
          status: res.statusCode,
          headers: res.headers,
          body: buf,
          text: () => buf.toString('utf8'),
          json: () => JSON.parse(buf.toString('utf8')),
        });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${url}: no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    if (data !== undefined) req.write(data);
    req.end();
  });
}

/* POSTs JSON and expects {"code":0}; resolves with the parsed answer. */
export async function postOk(url, json) {
  const r = await request('POST', url, { json });
  let j;
  try { j = r.json(); } catch { throw new Error(`POST ${url}: HTTP ${r.status}, not JSON: ${r.text()}`); }
  if (r.status !== 200 || j.code !== 0) throw new Error(`POST ${url}: HTTP ${r.status} ${r.text()}`);
  return j;
}

export async function health(base) {
  const r = await request('GET', `${base}/healthz`);
  if (r.status !== 200) throw new Error(`/healthz: HTTP ${r.status} ${r.text()}`);
  return r.json().data;
}

/* A multipart/form-data body from [{name, value}] and [{name, filename, type, data}]. */
export function multipart(parts) {
  const boundary = `----facecast${Math.random().toString(16).slice(2)}`;
  const chunks = [];
  for (const p of parts) {
    let head = `--${boundary}\r\nContent-Disposition: form-data; name="${p.name}"`;
    if (p.filename) head += `; filename="${p.filename}"\r\nContent-Type: ${p.type || 'application/octet-stream'}`;
    chunks.push(Buffer.from(`${head}\r\n\r\n`), Buffer.isBuffer(p.data) ? p.data : Buffer.from(String(p.value)), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

/* ---- waiting ------------------------------------------------------------------------------ */

export const delay = (ms) => new Promise((r) => setTimeout(r, ms));

/* Polls fn() until it returns a truthy value (resolved with it) or timeoutMs passes (rejects,
 * naming `what` and the last value). */
export async function waitFor(fn, { timeoutMs = 10000, intervalMs = 100, what = 'condition' } = {}) {
  const end = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
    await delay(intervalMs);
  }
}

/* ---- the server process ------------------------------------------------------------------- */

export function fdCount(pid) {
  return fs.readdirSync(`/proc/${pid}/fd`).length;
}

export function fdList(pid) {
  const out = [];
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try { out.push(`${fd} -> ${fs.readlinkSync(`/proc/${pid}/fd/${fd}`)}`); } catch { /* closed meanwhile */ }
  }
  return out;
}

export function rssKb(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

/* ---- audio and video files ---------------------------------------------------------------- */

/* 16-bit PCM mono WAV from float samples in [-1, 1]. */
export function wavBuffer(samples, rate) {
  const n = samples.length;
  const b = Buffer.alloc(44 + 2 * n);
  b.write('RIFF', 0);
  b.writeUInt32LE(36 + 2 * n, 4);
  b.write('WAVEfmt ', 8);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(rate, 24);
  b.writeUInt32LE(rate * 2, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write('data', 36);
  b.writeUInt32LE(2 * n, 40);
  for (let i = 0; i < n; i++) b.writeInt16LE(Math.round(Math.max(-1, Math.min(1, samples[i])) * 32767), 44 + 2 * i);
  return b;
}

/* Runs ffmpeg and resolves with its whole stdout. */
export function ffmpeg(args) {
  return new Promise((resolve, reject) => {
    const p = spawn('ffmpeg', ['-nostdin', '-v', 'error', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    const out = [];
    let err = '';
    p.stdout.on('data', (c) => out.push(c));
    p.stderr.on('data', (c) => { err += c; });
    p.on('error', reject);
    p.on('close', (code) => {
      if (code === 0) resolve(Buffer.concat(out));
      else reject(new Error(`ffmpeg ${args.join(' ')}: exit ${code}: ${err}`));
    });
  });
}

/* ---- mouth motion in the page ------------------------------------------------------------- */

/* Starts sampling the <video>'s mouth box (given in the avatar's frame pixels, scaled to the
 * video's size) every intervalMs: grey levels of the crop, and the mean absolute difference
 * from the previous sample, stamped with the page's performance.now() like the SSE events. */
export async function startMouthSampler(page, mouth, frameW, frameH, intervalMs = 40) {
  await page.evaluate(({ mouth, frameW, frameH, intervalMs }) => {
    const video = window.fc.video;
    const canvas = document.createElement('canvas');
    const ctx = canvas.getContext('2d', { willReadFrequently: true });
    const s = { samples: [], prev: null, timer: 0 };
    window.__mouth = s;
    const sample = () => {
      const vw = video.videoWidth, vh = video.videoHeight;
      if (!vw || !vh || video.readyState < 2) return;
      const sx = mouth.x * vw / frameW, sy = mouth.y * vh / frameH;
      const sw = mouth.w * vw / frameW, sh = mouth.h * vh / frameH;
      const cw = Math.max(1, Math.round(sw)), ch = Math.max(1, Math.round(sh));
      if (canvas.width !== cw || canvas.height !== ch) {
        canvas.width = cw;
        canvas.height = ch;
        s.prev = null;
      }
      ctx.drawImage(video, sx, sy, sw, sh, 0, 0, cw, ch);
      const px = ctx.getImageData(0, 0, cw, ch).data;
      const grey = new Float32Array(cw * ch);
      for (let i = 0, j = 0; j < grey.length; i += 4, j++) grey[j] = 0.299 * px[i] + 0.587 * px[i + 1] + 0.114 * px[i + 2];
      let d = null;
      if (s.prev) {
        let sum = 0;
        for (let j = 0; j < grey.length; j++) sum += Math.abs(grey[j] - s.prev[j]);
        d = sum / grey.length;
      }
      s.prev = grey;
      if (d !== null) s.samples.push({ t: performance.now(), d });
    };
    s.timer = setInterval(sample, intervalMs);
  }, { mouth, frameW, frameH, intervalMs });
}

/* Stops the sampler; resolves with its [{t, d}]. */
export async function stopMouthSampler(page) {
  return page.evaluate(() => {
    const s = window.__mouth;
    if (!s) return [];
    clearInterval(s.timer);
    window.__mouth = null;
    return s.samples;
  });
}

export async function mouthSamples(page) {
  return page.evaluate(() => (window.__mouth ? window.__mouth.samples.slice() : []));
}

/* Mean motion of the samples with t in [from, to]; {mean, n}. */
export function motion(samples, from, to) {
  const xs = samples.filter((s) => s.t >= from && s.t <= to).map((s) => s.d);
  return { mean: xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN, n: xs.length };
}

export function pageTime(page) {
  return page.evaluate(() => performance.now());
}

/* Stops the server and checks it went cleanly: exit 0 on SIGTERM within 5 s, and no GLib
 * CRITICAL or ERROR message in its output. */
export async function stopClean(srv) {
  const end = await srv.stop();
  const log = srv.log();
  assert.deepEqual(end, { code: 0, signal: null, killed: false },
    `the server should exit 0 on SIGTERM; log:\n${log.slice(-4000)}`);
  const bad = log.split('\n').filter((l) => /-(CRITICAL|ERROR) \*\*/.test(l));
  assert.deepEqual(bad, [], 'GLib criticals/errors in the server log');
}

/* Closes every page's session (DELETE) before closing the browser, so that a test that failed
 * half-way leaves no live session behind for the server's shutdown. */
export async function closeBrowser(browser) {
  if (!browser) return;
  for (const ctx of browser.contexts()) {
    for (const p of ctx.pages()) {
      await p.evaluate(() => (window.fc && window.fc.state.sessionid ? window.fc.disconnect('delete') : null))
        .catch(() => {});
    }
  }
  await browser.close();
}

/* ---- A/V sync: tone bursts and their onsets (avsync.test.mjs, soak.mjs) -------------------- */

export const BURST_RATE = 44100; /* not the server's 16 kHz: uploads go through its resampler */
export const BURSTS = [0.52, 1.36, 2.24, 3.12]; /* s from the start of the file */
export const BURST_LEN = 0.3;

/* 4 s of silence with a 300 Hz burst at each of BURSTS, as a WAV. */
export function burstWav() {
  const s = new Float32Array(Math.round(4.0 * BURST_RATE));
  const len = Math.round(BURST_LEN * BURST_RATE), ramp = 40;
  for (const b of BURSTS) {
    const a = Math.round(b * BURST_RATE);
    for (let i = 0; i < len; i++) {
      const env = i < ramp ? i / ramp : i > len - ramp ? (len - i) / ramp : 1;
      s[a + i] = 0.5 * env * Math.sin((2 * Math.PI * 300 * i) / BURST_RATE);
    }
  }
  return wavBuffer(s, BURST_RATE);
}

/* Onsets in 16 kHz PCM16: the first sample above 0.1 of full scale after >= 100 ms of quiet. */
export function audioOnsets(pcm) {
  const out = [];
  let quiet = 0;
  for (let i = 0; i < pcm.length; i++) {
    if (Math.abs(pcm[i]) > 3277) {
      if (quiet >= 1600) out.push(i / 16000);
      quiet = 0;
    } else {
      quiet++;
    }
  }
  return out;
}
