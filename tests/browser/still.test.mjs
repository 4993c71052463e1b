/* A talking photo's P pictures written by facecast itself (fc_h264_still: the live encoder's
 * way with x264's ultrafast preset) decoded by Chromium over WebRTC: 25 pictures a second
 * while speaking, no loss, the lips moving — and, after the speech, the picture the page shows
 * is the one a new viewer gets from a fresh key frame: a P picture the browser decoded
 * differently from the encoder's reconstruction would leave the first page's picture off and
 * drifting, where a second page starting from x264's key frame is not. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  closeBrowser, delay, health, launchBrowser, motion, openPage, pageTime, startMouthSampler,
  stopClean, stopMouthSampler, waitFor,
} from './helpers.mjs';
import { startServer } from './server.mjs';

const SENTENCE = 'Every picture after the key frame is written by facecast itself, and it decodes.';
const fmt = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : String(x));

/* The page's current video picture as grey levels (the whole frame). */
function grab(page) {
  return page.evaluate(() => {
    const v = window.fc.video;
    const c = document.createElement('canvas');
    c.width = v.videoWidth;
    c.height = v.videoHeight;
    const ctx = c.getContext('2d', { willReadFrequently: true });
    ctx.drawImage(v, 0, 0);
    const px = ctx.getImageData(0, 0, c.width, c.height).data;
    const g = [];
    for (let i = 0; i < px.length; i += 4) g.push(Math.round(0.299 * px[i] + 0.587 * px[i + 1] + 0.114 * px[i + 2]));
    return { w: c.width, h: c.height, g };
  });
}

/* mean absolute difference of two grabs, over the whole frame and over box (frame pixels) */
function diff(a, b, box) {
  let all = 0, inBox = 0, n = 0;
  for (let y = 0; y < a.h; y++)
    for (let x = 0; x < a.w; x++) {
      const d = Math.abs(a.g[y * a.w + x] - b.g[y * a.w + x]);
      all += d;
      if (x >= box.x && x < box.x + box.w && y >= box.y && y < box.y + box.h) inBox += d, n++;
    }
  return { all: all / (a.w * a.h), box: n ? inBox / n : NaN };
}

describe('a talking photo with facecast-written P pictures, in Chromium', () => {
  let srv, browser, pageA, pageB, hz;

  before(async () => {
    srv = await startServer({ args: ['--preset', 'ultrafast'] });
    hz = await health(srv.url);
    browser = await launchBrowser();
    pageA = await openPage(browser, srv.url);
  });

  after(async () => {
    await closeBrowser(browser);
    if (srv) await stopClean(srv);
  });

  const stats = (page) => page.evaluate(() => window.fc.getStats());
  const frames = (page, n) => waitFor(async () => {
    const x = await stats(page);
    return x && x.video && x.video.framesDecoded >= n && x;
  }, { timeoutMs: 10000, what: `${n} decoded frames` });

  test('speaking decodes at 25 fps, and the picture afterwards is a fresh key frame\'s', async (t) => {
    await pageA.evaluate(() => window.fc.connect());
    await frames(pageA, 10);
    /* The picture at rest must come from P pictures: key frames come every 2 s, so the grab
     * is taken 0.6 s after the speech and kept only if no key frame was decoded in between
     * (up to four utterances). */
    let afterA = null, sEnd = null, fps = 0, speaking = null, rest = null, tries = 0;
    while (!afterA && tries++ < 4) {
      const since = await pageA.evaluate(() => window.fc.state.speechEvents.length);
      await startMouthSampler(pageA, hz.mouth, hz.width, hz.height);
      await pageA.evaluate((text) => window.fc.say(text), SENTENCE);
      const wait = (type) => pageA.evaluate(({ type, since }) => window.fc.waitSpeech(type, { since, timeoutMs: 20000 }), { type, since });
      const start = await wait('start');
      const sA = await stats(pageA);
      const end = await wait('end');
      const sB = await stats(pageA);
      const restEnd = end.t + 1500;
      const now = await pageTime(pageA);
      if (now < restEnd) await delay(restEnd - now + 50);
      const samples = await stopMouthSampler(pageA);
      fps = (sB.video.framesDecoded - sA.video.framesDecoded) / ((sB.t - sA.t) / 1000);
      speaking = motion(samples, start.t, end.t);
      rest = motion(samples, end.t + 500, end.t + 1500);
      /* again, for the grab: a short utterance, then 0.6 s of rest */
      const since2 = await pageA.evaluate(() => window.fc.state.speechEvents.length);
      await pageA.evaluate((text) => window.fc.say(text), 'Rest now.');
      const end2 = await pageA.evaluate(({ since }) => window.fc.waitSpeech('end', { since, timeoutMs: 20000 }), { since: since2 });
      const k0 = (await stats(pageA)).video.keyFramesDecoded;
      const now2 = await pageTime(pageA);
      if (now2 < end2.t + 600) await delay(end2.t + 600 - now2);
      const grabbed = await grab(pageA);
      sEnd = await stats(pageA);
      if (k0 !== null && sEnd.video.keyFramesDecoded === k0) afterA = grabbed;
      else t.diagnostic(`a key frame came during the rest (try ${tries}): again`);
    }
    assert.ok(afterA, 'a rest picture without a key frame before it');

    pageB = await openPage(browser, srv.url);
    await pageB.evaluate(() => window.fc.connect());
    await frames(pageB, 10);
    await delay(400);
    const fresh = await grab(pageB);
    const d = diff(afterA, fresh, hz.mouth);
    t.diagnostic(`speaking ${fmt(fps)} fps; mouth motion speaking ${fmt(speaking.mean)}, at rest ` +
      `${fmt(rest.mean)}; video lost ${sEnd.video.packetsLost}; at rest the first page (P pictures) ` +
      `against a new one (a key frame): ${fmt(d.all)} grey levels apart over the picture, ` +
      `${fmt(d.box)} over the mouth`);
    assert.ok(fps >= 24, `decoded ${fmt(fps)} fps while speaking`);
    assert.equal(sEnd.video.packetsLost, 0, 'no video packets lost on loopback');
    assert.ok(speaking.mean > 1.0 && speaking.mean > 3 * rest.mean,
      `mouth motion speaking ${fmt(speaking.mean)} against rest ${fmt(rest.mean)}`);
    assert.equal(afterA.w, fresh.w);
    assert.ok(d.all < 1, `the pictures at rest differ by ${fmt(d.all)} grey levels on average`);
    assert.ok(d.box < 3, `the mouths at rest differ by ${fmt(d.box)} grey levels on average`);
  });
});
