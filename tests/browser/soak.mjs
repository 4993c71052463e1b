/* Soak: a command, not a CI test (scripts/soak.sh). One server, for CHURN_MIN minutes (30):
 *  - real WebRTC peers (headless Chromium pages) open and close sessions in turn, rounds of 20
 *    (half by pc.close(), half by DELETE), each talking a sentence while it is open;
 *  - a steady stream of HTTP requests beside them (health, metrics, a session's state, bad
 *    JSON, unknown sessions, new and kept-alive connections), about 20 a second;
 *  - and, for TALK_MIN minutes (60), one more session that talks without a pause and is
 *    recorded from its first minute to its last; at the end tone bursts go in through
 *    /humanaudio and the recording's last seconds give the A/V offset after the hour (the
 *    mouth's onsets against the bursts', as tests/browser/avsync.test.mjs does).
 * With TALK_MIN=0 there is no talking session: the churn alone (the recording's index grows
 * for the whole hour, and the allocator cannot give back pages that hold a piece of it among
 * freed session memory, so RSS measured beside it is not the churn's alone).
 * Every minute the server's RSS, open fds and threads are sampled, and the allocator's own
 * figure of memory in use (/metrics facecast_heap_bytes: growth there is a leak; RSS growing
 * while it stays flat is fragmentation), and after every round (no churning session open
 * then, so these are comparable). The baseline is the first round end
 * after WARM_MIN minutes (5: the allocator's arenas and the libraries' caches grow to their
 * working size first); after the churn, the growth of anonymous RSS (the process's own
 * memory) and of malloc's memory in use from it must stay under 5 %, and fds and threads must
 * be back where they were; total RSS is reported beside them, and the growth from the very
 * first round too. Prints a report and writes it as JSON to the path in SOAK_REPORT (default
 * build/soak-report.json). Exit 1 when a bound is broken. */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import {
  audioOnsets, BURSTS, burstWav, closeBrowser, delay, fdCount, ffmpeg, health, launchBrowser,
  multipart, openPage, request, rssKb, stopClean, waitFor,
} from './helpers.mjs';
import { repoRoot, startServer } from './server.mjs';

const CHURN_MIN = Number(process.env.CHURN_MIN || 30);
const TALK_MIN = Number(process.env.TALK_MIN || 60);
const WARM_MIN = Number(process.env.WARM_MIN || 5);
const ROUND = 20;
const FPS = 25;
const REPORT = process.env.SOAK_REPORT || path.join(repoRoot, 'build', 'soak-report.json');

/* malloc's memory in use, MB, from /metrics (null from a build without the figure) */
async function heapMb(base) {
  try {
    const m = /facecast_heap_bytes\{kind="in_use"\} (\d+)/.exec((await request('GET', `${base}/metrics`)).text());
    return m ? Number(m[1]) / 1048576 : null;
  } catch { return null; }
}
/* RSS split: anonymous (the process's own memory) and file-backed (library code and data
 * pages, which grow as code paths run for the first time and are not the process's to free) */
const rssSplit = (pid) => {
  const st = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return { anonMb: Number(/RssAnon:\s+(\d+)/.exec(st)[1]) / 1024, fileMb: Number(/RssFile:\s+(\d+)/.exec(st)[1]) / 1024 };
};
const threads = (pid) => Number(/Threads:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
const stamp = () => new Date().toISOString().slice(11, 19);
const say = (s) => console.log(`[${stamp()}] ${s}`);

/* ---- the steady HTTP stream -------------------------------------------------------------- */

function httpStream(base, talkId, stopAt) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 2 });
  const stats = { sent: 0, byStatus: {} };
  const kinds = [
    () => ['GET', '/healthz'],
    () => ['GET', '/metrics'],
    () => ['POST', '/is_speaking', { sessionid: talkId() }],
    () => ['POST', '/is_speaking', { sessionid: 'no-such-session' }],
    () => ['POST', '/human', '{"sessionid": [1,'],
    () => ['GET', '/no-such-page.js'],
  ];
  const one = (k) => new Promise((resolve) => {
    const [method, p, body] = kinds[k % kinds.length]();
    const data = body === undefined ? undefined : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    const req = http.request(`${base}${p}`, {
      method, agent: k % 2 ? agent : false, timeout: 10000,
      headers: data ? { 'Content-Type': 'application/json', 'Content-Length': data.length } : {},
    }, (res) => {
      res.resume();
      res.on('end', () => {
        stats.byStatus[res.statusCode] = (stats.byStatus[res.statusCode] || 0) + 1;
        resolve();
      });
    });
    req.on('error', () => { stats.byStatus.error = (stats.byStatus.error || 0) + 1; resolve(); });
    req.on('timeout', () => req.destroy());
    if (data) req.write(data);
    req.end();
  });
  const done = (async () => {
    for (let k = 0; Date.now() < stopAt; k++) {
      await one(k);
      stats.sent++;
      await delay(50);
    }
    agent.destroy();
  })();
  return { stats, done };
}

/* ---- the churn ---------------------------------------------------------------------------- */

async function churnRound(browser, base, out) {
  const page = await openPage(browser, base);
  for (let i = 0; i < ROUND; i++) {
    const id = await page.evaluate(() => window.fc.connect());
    await waitFor(() => page.evaluate(async () => {
      const s = await window.fc.getStats();
      return s && s.video && s.video.framesDecoded >= 5;
    }), { timeoutMs: 15000, what: '5 decoded frames' });
    await page.evaluate(() => window.fc.say('Hello, this session opens and closes in turn.'));
    await delay(1500);
    const how = i % 2 ? 'delete' : 'close';
    await page.evaluate((h) => window.fc.disconnect(h), how);
    out.sessions++;
    /* a closed peer is noticed within seconds; a DELETE at once */
    const t0 = Date.now();
    while (Date.now() - t0 < 15000) {
      const r = await request('POST', `${base}/is_speaking`, { json: { sessionid: id } });
      if (r.status === 404) break;
      await delay(200);
    }
  }
  await page.context().close();
}

/* ---- the hour of talk --------------------------------------------------------------------- */

/* The A/V offsets (video − audio, s) of the bursts in the last `tail` seconds of the file. */
async function tailOffsets(mp4, hz, tail) {
  const araw = await ffmpeg(['-sseof', `-${tail}`, '-i', mp4, '-vn', '-f', 's16le', '-ac', '1', '-ar', '16000', '-']);
  const vraw = await ffmpeg(['-sseof', `-${tail}`, '-i', mp4, '-an', '-f', 'rawvideo', '-pix_fmt', 'gray', '-']);
  const pcm = new Int16Array(araw.buffer, araw.byteOffset, araw.length >> 1);
  const aon = audioOnsets(pcm).slice(-BURSTS.length);
  const W = hz.width, H = hz.height, m = hz.mouth, nf = vraw.length / (W * H);
  /* the two decodes start at the same key frame: their starts agree within a frame */
  const crop = (f) => {
    const o = new Uint8Array(m.w * m.h);
    for (let y = 0; y < m.h; y++) {
      const off = f * W * H + (m.y + y) * W + m.x;
      o.set(vraw.subarray(off, off + m.w), y * m.w);
    }
    return o;
  };
  const restFrame = Math.floor((aon[0] - 0.2) * FPS);
  const rest = crop(restFrame);
  const diff = [];
  for (let f = 0; f < nf; f++) {
    const c = crop(f);
    let s = 0;
    for (let k = 0; k < c.length; k++) s += Math.abs(c[k] - rest[k]);
    diff.push(s / c.length);
  }
  const peak = Math.max(...diff.slice(restFrame));
  const von = [];
  for (let f = restFrame + 1; f < nf && von.length < BURSTS.length; f++)
    if (diff[f] > peak / 3 && diff[f - 1] <= peak / 3) von.push(f);
  return { audio: aon, frames: von, offsets: von.map((f, b) => f / FPS - aon[b]), peak,
           audioSeconds: pcm.length / 16000, videoFrames: nf };
}

async function talkHour(browser, base, rep) {
  const page = await openPage(browser, base);
  const id = await page.evaluate(() => window.fc.connect());
  rep.talk.id = id;
  await page.evaluate(() => window.fc.startRecording());
  const t0 = Date.now(), end = t0 + TALK_MIN * 60000;
  const lines = [
    'The quick brown fox jumps over the lazy dog, again and again, all through the night.',
    'This session has been talking for a long time, and its mouth must still match its voice.',
    'Numbers: one, two, three, four, five, six, seven, eight, nine, ten.',
  ];
  let k = 0;
  /* a sentence (about 5 s of speech) every 4.5 s: never silent, the queue short */
  while (Date.now() < end - 20000) {
    const r = await request('POST', `${base}/human`, { json: { sessionid: id, text: lines[k++ % lines.length], type: 'echo' } });
    if (r.status !== 200) rep.talk.refused = (rep.talk.refused || 0) + 1;
    await delay(4500);
  }
  rep.talk.requests = k;
  rep.talk.speakingAtEnd = await page.evaluate(() => window.fc.isSpeaking());
  /* the bursts go in after what is queued is cut: they must start on a quiet mouth */
  await request('POST', `${base}/interrupt_talk`, { json: { sessionid: id } });
  await waitFor(async () => !(await page.evaluate(() => window.fc.isSpeaking())), { timeoutMs: 10000, what: 'quiet' });
  await delay(800);
  const { body, contentType } = multipart([
    { name: 'sessionid', value: id },
    { name: 'file', filename: 'bursts.wav', type: 'audio/wav', data: burstWav() },
  ]);
  const up = await request('POST', `${base}/humanaudio`, { body, headers: { 'Content-Type': contentType } });
  if (up.status !== 200) throw new Error(`/humanaudio: ${up.text()}`);
  await delay(5000);
  const url = await page.evaluate(() => window.fc.stopRecording());
  const rec = await request('GET', `${base}${url}`, { timeoutMs: 300000 });
  const mp4 = path.join(path.dirname(REPORT), 'soak-talk.mp4');
  fs.writeFileSync(mp4, rec.body);
  rep.talk.recordingBytes = rec.body.length;
  rep.talk.minutes = (Date.now() - t0) / 60000;
  Object.assign(rep.talk, await tailOffsets(mp4, await health(base), 6));
  await page.evaluate(() => window.fc.disconnect('delete'));
  await page.context().close();
}

/* ---- main --------------------------------------------------------------------------------- */

async function main() {
  const srv = await startServer({ args: ['--max-sessions', '24'] });
  const browser = await launchBrowser();
  const rep = { started: new Date().toISOString(), churnMinutes: CHURN_MIN, talkMinutes: TALK_MIN,
                samples: [], churn: { sessions: 0, rounds: 0 }, talk: {}, ok: true, failures: [] };
  const sample = async (what) => {
    const s = { t: (Date.now() - t0) / 60000, what, rssMb: rssKb(srv.pid) / 1024, fds: fdCount(srv.pid),
                threads: threads(srv.pid), heapMb: await heapMb(srv.url), ...rssSplit(srv.pid) };
    rep.samples.push(s);
    say(`${what}: RSS ${s.rssMb.toFixed(1)} MB (anon ${s.anonMb.toFixed(1)}, file ${s.fileMb.toFixed(1)}), ` +
        `${s.fds} fds, ${s.threads} threads` +
        (s.heapMb === null ? '' : `, heap in use ${s.heapMb.toFixed(2)} MB`));
    return s;
  };
  const t0 = Date.now();
  let talkId = 'none';
  const talk = TALK_MIN > 0
    ? talkHour(browser, srv.url, rep).catch((e) => { rep.failures.push(`talk: ${e.message}`); })
    : Promise.resolve();
  if (TALK_MIN > 0) {
    await waitFor(() => rep.talk.id !== undefined, { timeoutMs: 30000, what: 'the talking session' });
    talkId = rep.talk.id;
  }
  const churnEnd = t0 + CHURN_MIN * 60000;
  const stream = httpStream(srv.url, () => talkId, churnEnd);
  const timer = setInterval(() => sample('minute'), 60000);

  /* rounds until the warm-up is over, then the baseline at a round's end */
  let first = null, base = null;
  rep.rounds = [];
  while (!base || Date.now() < churnEnd) {
    await churnRound(browser, srv.url, rep.churn);
    rep.churn.rounds++;
    /* past the server's second trim, 3 s after a close (so every sample sees the same state) */
    await delay(5000);
    const s = await sample(`after round ${rep.churn.rounds}`);
    rep.rounds.push(s);
    if (!first) first = s;
    if (!base && Date.now() - t0 >= WARM_MIN * 60000) {
      base = s;
      say(`baseline (after ${WARM_MIN} min of warm-up): RSS ${s.rssMb.toFixed(1)} MB`);
    }
  }
  await stream.done;
  rep.http = stream.stats;
  await delay(5000);
  const endChurn = await sample('after the churn');
  rep.churn.rssGrowthPct = 100 * (endChurn.rssMb - base.rssMb) / base.rssMb;
  rep.churn.rssGrowthFromFirstRoundPct = 100 * (endChurn.rssMb - first.rssMb) / first.rssMb;
  rep.churn.baselineMb = base.rssMb;
  rep.churn.anonBaselineMb = base.anonMb;
  rep.churn.anonEndMb = endChurn.anonMb;
  rep.churn.anonGrowthPct = 100 * (endChurn.anonMb - base.anonMb) / base.anonMb;
  rep.churn.fileGrowthMb = endChurn.fileMb - base.fileMb;
  if (base.heapMb !== null && endChurn.heapMb !== null) {
    rep.churn.heapBaselineMb = base.heapMb;
    rep.churn.heapEndMb = endChurn.heapMb;
    rep.churn.heapGrowthPct = 100 * (endChurn.heapMb - base.heapMb) / base.heapMb;
    if (!(rep.churn.heapGrowthPct < 5)) rep.failures.push(`heap in use grew ${rep.churn.heapGrowthPct.toFixed(1)} % (limit 5 %)`);
  }
  rep.churn.firstRoundMb = first.rssMb;
  rep.churn.fdDelta = endChurn.fds - base.fds;
  rep.churn.threadDelta = endChurn.threads - base.threads;
  /* The bound is on the process's own memory: anonymous RSS. File-backed RSS is library pages
   * (code and data mapped in as code paths first run, reclaimable by the kernel, the same for
   * one session or a thousand); it is reported, not judged. */
  if (!(rep.churn.anonGrowthPct < 5))
    rep.failures.push(`anonymous RSS grew ${rep.churn.anonGrowthPct.toFixed(1)} % (limit 5 %)`);
  if (Math.abs(rep.churn.fdDelta) > 2) rep.failures.push(`fds ${base.fds} -> ${endChurn.fds}`);
  if (Math.abs(rep.churn.threadDelta) > 2) rep.failures.push(`threads ${base.threads} -> ${endChurn.threads}`);

  await talk;
  clearInterval(timer);
  const offs = rep.talk.offsets || [];
  if (TALK_MIN <= 0) { /* churn only */ }
  else if (offs.length !== BURSTS.length) rep.failures.push(`A/V: ${offs.length} of ${BURSTS.length} bursts found`);
  else if (offs.some((o) => Math.abs(o) > 0.04 + 1e-9))
    rep.failures.push(`A/V offset after ${TALK_MIN} min: ${offs.map((o) => `${Math.round(o * 1000)} ms`).join(', ')}`);
  const health1 = await health(srv.url);
  rep.sessionsAtEnd = health1.sessions;
  await sample('end');
  await closeBrowser(browser);
  await stopClean(srv).catch((e) => { rep.failures.push(`stop: ${e.message}`); });
  rep.ok = rep.failures.length === 0;
  rep.finished = new Date().toISOString();
  fs.mkdirSync(path.dirname(REPORT), { recursive: true });
  fs.writeFileSync(REPORT, JSON.stringify(rep, null, 2));
  say(`churn: ${rep.churn.sessions} sessions in ${rep.churn.rounds} rounds; HTTP ${rep.http.sent} requests ` +
      `${JSON.stringify(rep.http.byStatus)}; RSS ${rep.churn.baselineMb.toFixed(1)} -> ` +
      `${endChurn.rssMb.toFixed(1)} MB (${rep.churn.rssGrowthPct.toFixed(2)} % from the baseline, ` +
      `${rep.churn.rssGrowthFromFirstRoundPct.toFixed(2)} % from the first round), fds Δ ${rep.churn.fdDelta}, ` +
      `threads Δ ${rep.churn.threadDelta}; anonymous RSS ${rep.churn.anonBaselineMb.toFixed(1)} -> ` +
      `${rep.churn.anonEndMb.toFixed(1)} MB (${rep.churn.anonGrowthPct.toFixed(2)} %), file-backed ` +
      `${rep.churn.fileGrowthMb >= 0 ? '+' : ''}${rep.churn.fileGrowthMb.toFixed(1)} MB` +
      (rep.churn.heapGrowthPct === undefined ? '' : `; heap in use ${rep.churn.heapBaselineMb.toFixed(2)} -> ` +
       `${rep.churn.heapEndMb.toFixed(2)} MB (${rep.churn.heapGrowthPct.toFixed(2)} %)`));
  if (TALK_MIN > 0) say(`talk: ${(rep.talk.minutes || 0).toFixed(1)} min, ${rep.talk.requests} sentences, recording ` +
      `${((rep.talk.recordingBytes || 0) / 1e6).toFixed(1)} MB; A/V offsets at the end ` +
      `${offs.map((o) => `${Math.round(o * 1000)} ms`).join(', ')}`);
  say(rep.ok ? `soak passed (report: ${REPORT})` : `soak FAILED: ${rep.failures.join('; ')}`);
  process.exit(rep.ok ? 0 : 1);
}

main().catch((e) => { console.error(e); process.exit(1); });
