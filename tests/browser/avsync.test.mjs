/* A/V sync of a live session, measured in its recording: with the page connected, tone bursts
 * at known times go in through /humanaudio while the session records; in the downloaded MP4
 * the mouth starts to change within one frame (40 ms) of each burst's onset in the same file's
 * audio track. (tests/test_sync.c does the same for offline renders.) */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  audioOnsets, BURST_LEN, BURSTS, burstWav, closeBrowser, ffmpeg, health, launchBrowser, multipart,
  openPage, request, stopClean,
} from './helpers.mjs';
import { startServer } from './server.mjs';

const FPS = 25;
const TOLERANCE_S = 0.04; /* one frame */

describe('A/V sync through a recording', () => {
  let srv, browser, page, tmp;

  before(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'fc-avsync-'));
    srv = await startServer();
    browser = await launchBrowser();
    page = await openPage(browser, srv.url);
  });

  after(async () => {
    await closeBrowser(browser);
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
    if (srv) await stopClean(srv);
  });

  test('each mouth onset is within one frame of its audio onset in the recorded MP4', async (t) => {
    const hz = await health(srv.url);
    const id = await page.evaluate(() => window.fc.connect());
    await page.evaluate(() => window.fc.startRecording());
    const since = await page.evaluate(() => window.fc.state.speechEvents.length);

    const { body, contentType } = multipart([
      { name: 'sessionid', value: id },
      { name: 'file', filename: 'bursts.wav', type: 'audio/wav', data: burstWav() },
    ]);
    const up = await request('POST', `${srv.url}/humanaudio`, { body, headers: { 'Content-Type': contentType } });
    assert.equal(up.status, 200, `/humanaudio: ${up.text()}`);
    assert.equal(up.json().code, 0);
    const start = await page.evaluate((s) => window.fc.waitSpeech('start', { since: s, timeoutMs: 10000 }), since);
    const end = await page.evaluate((s) => window.fc.waitSpeech('end', { since: s, timeoutMs: 15000 }), since);
    assert.equal(end.id, start.id);
    assert.equal(await page.evaluate(() => window.fc.isSpeaking()), false);

    const url = await page.evaluate(() => window.fc.stopRecording());
    assert.equal(url, `/record/${id}`);
    assert.equal(await page.getAttribute('#download', 'href'), url, 'the page links the recording');
    const rec = await request('GET', `${srv.url}${url}`);
    assert.equal(rec.status, 200, `GET ${url}: ${rec.status}`);
    assert.match(String(rec.headers['content-type']), /^video\/mp4/);
    const mp4 = path.join(tmp, 'rec.mp4');
    fs.writeFileSync(mp4, rec.body);
    await page.evaluate(() => window.fc.disconnect());

    /* Decoded audio, 16 kHz mono, and its burst onsets. */
    const araw = await ffmpeg(['-i', mp4, '-f', 's16le', '-ac', '1', '-ar', '16000', '-']);
    const pcm = new Int16Array(araw.buffer, araw.byteOffset, araw.length >> 1);
    const aon = audioOnsets(pcm);

    /* Decoded video, grey, and the mouth box's change against a rest frame before the first
     * burst. */
    const W = hz.width, H = hz.height, m = hz.mouth;
    const vraw = await ffmpeg(['-i', mp4, '-f', 'rawvideo', '-pix_fmt', 'gray', '-']);
    assert.equal(vraw.length % (W * H), 0, `decoded video is not ${W}×${H}`);
    const nf = vraw.length / (W * H);
    const crop = (f) => {
      const out = new Uint8Array(m.w * m.h);
      for (let y = 0; y < m.h; y++) {
        const off = f * W * H + (m.y + y) * W + m.x;
        out.set(vraw.subarray(off, off + m.w), y * m.w);
      }
      return out;
    };
    t.diagnostic(`recording: ${rec.body.length} bytes, ${nf} frames (${(nf / FPS).toFixed(2)} s), ` +
      `audio ${(pcm.length / 16000).toFixed(2)} s; audio onsets ${aon.map((x) => x.toFixed(3)).join(', ')} s`);
    assert.equal(aon.length, BURSTS.length, `audio onsets found: ${aon.map((x) => x.toFixed(3))}`);
    /* The recording keeps the bursts' spacing (no frames dropped or doubled in between). */
    for (let b = 1; b < BURSTS.length; b++) {
      const want = BURSTS[b] - BURSTS[0], got = aon[b] - aon[0];
      assert.ok(Math.abs(got - want) <= TOLERANCE_S, `burst ${b} at +${got.toFixed(3)} s, expected +${want.toFixed(3)} s`);
    }
    const restFrame = Math.floor((aon[0] - 0.2) * FPS);
    assert.ok(restFrame >= 0, `the recording starts ${aon[0].toFixed(3)} s before the first burst`);
    const rest = crop(restFrame);
    const diff = [];
    for (let f = 0; f < nf; f++) {
      const c = crop(f);
      let sum = 0;
      for (let k = 0; k < c.length; k++) sum += Math.abs(c[k] - rest[k]);
      diff.push(sum / c.length);
    }
    const peak = Math.max(...diff.slice(restFrame));
    const von = [];
    for (let f = restFrame + 1; f < nf && von.length < BURSTS.length + 1; f++) {
      if (diff[f] > peak / 3 && diff[f - 1] <= peak / 3) von.push(f);
    }
    if (process.env.FC_SYNC_DEBUG) t.diagnostic(`diff: ${diff.map((d, f) => `${f}:${d.toFixed(1)}`).join(' ')}`);
    const offsets = [];
    for (let b = 0; b < BURSTS.length && b < von.length; b++) offsets.push(von[b] / FPS - aon[b]);
    t.diagnostic(`mouth onsets (frame) ${von.join(', ')}; peak change ${peak.toFixed(1)}; offsets ` +
      `video − audio ${offsets.map((x) => `${Math.round(x * 1000) || 0} ms`).join(', ')}`);
    assert.ok(peak > 10, `peak mouth change ${peak.toFixed(1)} grey levels`);
    assert.equal(von.length, BURSTS.length, `mouth onsets found at frames ${von.join(', ')}`);
    for (let b = 0; b < BURSTS.length; b++) {
      assert.ok(Math.abs(offsets[b]) <= TOLERANCE_S + 1e-9,
        `burst ${b}: mouth onset frame ${von[b]} (${(von[b] / FPS).toFixed(3)} s) vs audio ${aon[b].toFixed(3)} s`);
    }
    /* Between bursts the mouth rests again. */
    for (let b = 0; b + 1 < BURSTS.length; b++) {
      const mid = Math.round(((aon[b] + BURST_LEN + aon[b + 1]) / 2) * FPS);
      assert.ok(diff[mid] < peak / 6, `mouth change ${diff[mid].toFixed(1)} between bursts ${b} and ${b + 1} (frame ${mid})`);
    }
  });
});
