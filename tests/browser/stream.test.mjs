/* web/stream.html, the WebSocket stream's demo page, in Chromium: WebCodecs decodes the H.264
 * access units (no decoder error, ~25 pictures a second drawn), the PCM plays through an
 * AudioContext and is loud while the avatar speaks, the speech events come over the same
 * socket, a key frame comes on request, and closing the page's socket closes the session. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { closeBrowser, delay, launchBrowser, postOk, request, stopClean, waitFor } from './helpers.mjs';
import { startServer } from './server.mjs';

describe('WS /ws/stream in Chromium (web/stream.html)', () => {
  let srv, browser, page;

  before(async () => {
    srv = await startServer();
    browser = await launchBrowser();
    const context = await browser.newContext();
    page = await context.newPage();
    page.fcErrors = [];
    page.on('pageerror', (e) => page.fcErrors.push(`pageerror: ${e.message}`));
    await page.goto(`${srv.url}/stream.html`);
    await page.click('#connect');
    await waitFor(() => page.evaluate(() => window.fcStream.session !== null), { what: 'the session message' });
  });

  after(async () => {
    await closeBrowser(browser);
    if (srv) await stopClean(srv);
  });

  const state = () => page.evaluate(() => ({ ...window.fcStream, session: window.fcStream.session }));

  test('the pictures decode and the speech plays', async () => {
    const s0 = await state();
    assert.equal(s0.session.video.codec, 'h264');
    const supported = await page.evaluate(() => typeof VideoDecoder === 'function');
    assert.ok(supported, 'WebCodecs VideoDecoder in this Chromium');
    await postOk(`${srv.url}/human`, { sessionid: s0.session.sessionid, text: 'Hello from a plain web socket, decoded by web codecs.', type: 'echo' });
    await waitFor(async () => (await state()).speech.some((e) => e.type === 'end'), { timeoutMs: 30000, what: 'the speech end event' });
    const s1 = await state();
    const secs = (s1.audioChunks - s0.audioChunks) / 25;
    assert.ok(secs > 1, `audio chunks came (${s1.audioChunks})`);
    const fps = (s1.framesDecoded - s0.framesDecoded) / secs;
    assert.ok(fps > 20 && fps < 30, `about 25 pictures decoded a second (${fps.toFixed(1)})`);
    assert.ok(s1.loudChunks >= 10, `the audio is the speech (${s1.loudChunks} loud chunks)`);
    assert.ok(s1.speech.some((e) => e.type === 'start' && e.text), 'speech events with their text');
    assert.deepEqual(s1.errors, [], 'no decoder or server errors');
    assert.deepEqual(page.fcErrors, [], 'no page errors');
  });

  test('a key frame on request', async () => {
    /* Periodic key frames come every 50 frames after the last one; the one asked for is off
     * that beat, within a few frames of the request. */
    const s0 = await state();
    const beat = s0.keyIndices[s0.keyIndices.length - 1];
    await page.click('#key');
    await delay(1000);
    const s1 = await state();
    const asked = s1.keyIndices.filter((i) => i > s0.lastIndex && (i - beat) % 50 !== 0);
    assert.ok(asked.length > 0 && asked[0] - s0.lastIndex <= 15,
      `a key frame off the 2 s beat soon after the request (keys ${s1.keyIndices.slice(-4)}, asked at ${s0.lastIndex})`);
  });

  test('closing the socket closes the session', async () => {
    const sid = (await state()).session.sessionid;
    await page.click('#close');
    await waitFor(async () => {
      const r = await request('GET', `${srv.url}/api/admin/sessions`);
      return !r.json().data.sessions.some((x) => x.sessionid === sid);
    }, { what: 'the session gone' });
    // the server may drop the session before the page's onclose has run: wait for it too
    await waitFor(async () => (await state()).closed, { what: "the page's close event" });
    const closed = (await state()).closed;
    assert.ok(closed && closed.code === 1000, `the page saw a clean close (${JSON.stringify(closed)})`);
  });
});
