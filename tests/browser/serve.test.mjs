/* The page against a live `facecast serve` in Chromium: connecting, frame rate and audio from
 * getStats, SSE speech events, the lips moving while speaking and resting after, interrupting
 * (by /interrupt_talk and by /human's interrupt flag), the microphone path (Chromium's fake
 * capture device → AudioWorklet or ScriptProcessorNode → 16 kHz PCM16 → WebSocket) moving the
 * lips, server errors shown on the page, and the page noticing a session the server closed. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  closeBrowser, delay, health, launchBrowser, motion, openPage, pageTime, postOk, request,
  startMouthSampler, stopClean, stopMouthSampler, waitFor,
} from './helpers.mjs';
import { startServer } from './server.mjs';

const SENTENCE = 'Hello there! I am a talking head, streamed to your browser in real time.';
const LONG_SENTENCE = 'This is a long sentence that keeps going for quite a while, so that there ' +
  'is plenty of time to interrupt it: one, two, three, four, five, six, seven, eight, nine, ten, ' +
  'eleven, twelve, thirteen, fourteen, fifteen, sixteen, seventeen, eighteen, nineteen, twenty.';
const MOTION_RATIO = 3;   /* mean motion while speaking over mean motion at rest */
const MOTION_FLOOR = 1.0; /* mean absolute grey-level change per sample while speaking */

const fmt = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : String(x));

describe('facecast serve in Chromium', () => {
  let srv, browser, page, hz;

  before(async () => {
    srv = await startServer();
    hz = await health(srv.url);
    browser = await launchBrowser();
    page = await openPage(browser, srv.url);
  });

  after(async () => {
    await closeBrowser(browser);
    if (srv) await stopClean(srv);
  });

  const speechCount = () => page.evaluate(() => window.fc.state.speechEvents.length);
  const waitSpeech = (type, since, timeoutMs = 20000) =>
    page.evaluate(({ type, since, timeoutMs }) => window.fc.waitSpeech(type, { since, timeoutMs }), { type, since, timeoutMs });
  const stats = () => page.evaluate(() => window.fc.getStats());

  /* Clicks the mic button for ~3 s: chunks flow over the WebSocket (about 50 a second), the
   * fake device is not silent, and the mouth moves more than in the 1.4 s before. */
  async function micCheck(t) {
    await waitFor(async () => !(await page.evaluate(() => window.fc.isSpeaking())), { what: 'silence' });
    const before = await page.evaluate(() => ({ chunks: window.fc.state.micChunks, bytes: window.fc.state.micBytes }));
    await startMouthSampler(page, hz.mouth, hz.width, hz.height);
    await delay(2000); /* the rest window is the last 1.4 s of it: the video lags the events */
    const restTo = await pageTime(page);
    await page.click('#mic');
    await waitFor(() => page.evaluate(() => window.fc.state.mic), { what: 'the microphone to start' });
    const micFrom = await pageTime(page);
    /* The fake device beeps briefly twice a second: keep the loudest chunk level seen. */
    const peakLevel = await page.evaluate(async () => {
      let peak = 0;
      const end = performance.now() + 3000;
      while (performance.now() < end) {
        peak = Math.max(peak, window.fc.state.micLevel);
        await new Promise((r) => setTimeout(r, 5));
      }
      return peak;
    });
    const micTo = await pageTime(page);
    const mic = await page.evaluate(() => ({
      chunks: window.fc.state.micChunks, bytes: window.fc.state.micBytes, mode: window.fc.state.micMode,
      error: window.fc.state.lastError,
    }));
    await page.click('#mic');
    await waitFor(() => page.evaluate(() => !window.fc.state.mic), { what: 'the microphone to stop' });
    const samples = await stopMouthSampler(page);
    const rest = motion(samples, restTo - 1400, restTo);
    const moving = motion(samples, micFrom + 300, micTo);
    const seconds = (micTo - micFrom) / 1000;
    const chunks = mic.chunks - before.chunks, bytes = mic.bytes - before.bytes;
    t.diagnostic(`microphone (${mic.mode}): ${chunks} chunks / ${bytes} bytes in ${fmt(seconds, 1)} s, ` +
      `peak chunk RMS ${fmt(peakLevel, 3)}; mouth motion with mic ${fmt(moving.mean)} (n=${moving.n}), ` +
      `before ${fmt(rest.mean)} (n=${rest.n}), ratio ${fmt(moving.mean / rest.mean, 1)}`);
    assert.equal(mic.error, null, `page error: ${mic.error}`);
    assert.ok(chunks >= 40 * seconds, `only ${chunks} chunks in ${fmt(seconds, 1)} s`);
    assert.equal(bytes, chunks * 640, '320 samples of PCM16 per chunk');
    assert.ok(peakLevel > 0.01, `the fake capture device sounds silent (peak chunk RMS ${peakLevel})`);
    const series = () => samples.filter((x) => x.t >= restTo - 1400).map((x) => `${Math.round(x.t - micFrom)}:${x.d.toFixed(1)}`).join(' ');
    assert.ok(moving.mean > MOTION_FLOOR, `mouth motion with the microphone ${fmt(moving.mean)} <= ${MOTION_FLOOR}; ms:motion ${series()}`);
    assert.ok(moving.mean > MOTION_RATIO * rest.mean,
      `mouth motion with the microphone ${fmt(moving.mean)} is not > ${MOTION_RATIO}× rest ${fmt(rest.mean)}; ms:motion ${series()}`);
  }

  test('the page connects: the server answers the offer and media flows', async (t) => {
    const id = await page.evaluate(() => window.fc.connect());
    assert.match(id, /^[0-9A-Za-z_-]+$/, 'session id');
    const st = await page.evaluate(() => ({ ...window.fc.state, speechEvents: undefined }));
    assert.equal(st.connected, true);
    assert.equal(st.sessionid, id);
    assert.equal((await health(srv.url)).sessions, 1);
    const s = await waitFor(async () => {
      const x = await stats();
      return x && x.video && x.video.framesDecoded >= 10 && x.audio && x.audio.packetsReceived > 10 && x;
    }, { timeoutMs: 10000, what: '10 decoded frames and audio packets' });
    assert.equal(s.video.width, hz.width);
    assert.equal(s.video.height, hz.height);
    /* The page's own figures fill in once a second. */
    await waitFor(() => page.evaluate(() => window.fc.state.statsCount >= 2), { what: 'two stats ticks' });
    const shown = await page.evaluate(() => ({
      fps: document.getElementById('st-fps').textContent,
      res: document.getElementById('st-res').textContent,
      rtt: document.getElementById('st-rtt').textContent,
    }));
    assert.equal(shown.res, `${hz.width}×${hz.height}`);
    assert.ok(Number(shown.fps) > 0, `fps shown: ${shown.fps}`);
    assert.ok(Number.isFinite(Number(shown.rtt)), `RTT shown: ${shown.rtt}`);
    t.diagnostic(`connected session ${id}: ${JSON.stringify(shown)}`);
  });

  test('microphone on a fresh session: the fake device streams over the WebSocket and moves the lips', async (t) => {
    await micCheck(t);
  });

  test('the microphone resampler turns 48 and 44.1 kHz into 16 kHz PCM16 LE in 20 ms chunks', async (t) => {
    const r = await page.evaluate(() => {
      const out = {};
      for (const rate of [48000, 44100]) {
        const chunks = [];
        const c = new window.fc.Pcm16Chunker(rate, 16000, 320);
        for (let i = 0; i < rate; i += 128) { /* 1 s of a 1 kHz sine in render quanta */
          const blk = new Float32Array(Math.min(128, rate - i));
          for (let j = 0; j < blk.length; j++) blk[j] = 0.5 * Math.sin((2 * Math.PI * 1000 * (i + j)) / rate);
          c.push(blk, (b) => chunks.push(b));
        }
        const pcm = [];
        for (const b of chunks) {
          const v = new DataView(b);
          for (let k = 0; k < b.byteLength; k += 2) pcm.push(v.getInt16(k, true));
        }
        let crossings = 0, peak = 0;
        for (let i = 1; i < pcm.length; i++) {
          if ((pcm[i - 1] < 0) !== (pcm[i] < 0)) crossings++;
          peak = Math.max(peak, Math.abs(pcm[i]));
        }
        out[rate] = { chunks: chunks.length, sizes: [...new Set(chunks.map((b) => b.byteLength))], crossings, peak };
      }
      return out;
    });
    t.diagnostic(`resampler: ${JSON.stringify(r)}`);
    for (const rate of ['48000', '44100']) {
      const x = r[rate];
      assert.ok(x.chunks >= 49 && x.chunks <= 50, `${rate} Hz: ${x.chunks} chunks for 1 s`);
      assert.deepEqual(x.sizes, [640], `${rate} Hz: chunk sizes`);
      assert.ok(Math.abs(x.crossings - 2000) <= 6, `${rate} Hz: ${x.crossings} zero crossings for 1 kHz over 1 s`);
      assert.ok(x.peak > 0.45 * 32767 && x.peak <= 0.5 * 32767 + 1, `${rate} Hz: peak ${x.peak}`);
    }
  });

  test('microphone fallback (ScriptProcessorNode) streams 20 ms chunks too', async (t) => {
    await page.evaluate(() => { window.fc.options.micMode = 'scriptprocessor'; });
    try {
      const before = await page.evaluate(() => window.fc.state.micChunks);
      await page.click('#mic');
      await waitFor(() => page.evaluate(() => window.fc.state.mic), { what: 'the microphone to start' });
      const t0 = await pageTime(page);
      await delay(2000);
      const st = await page.evaluate(() => ({ chunks: window.fc.state.micChunks, mode: window.fc.state.micMode, error: window.fc.state.lastError }));
      const secs = ((await pageTime(page)) - t0) / 1000;
      await page.click('#mic');
      await waitFor(() => page.evaluate(() => !window.fc.state.mic), { what: 'the microphone to stop' });
      const chunks = st.chunks - before;
      t.diagnostic(`fallback (${st.mode}): ${chunks} chunks in ${fmt(secs, 1)} s`);
      assert.equal(st.mode, 'scriptprocessor');
      assert.equal(st.error, null);
      assert.ok(chunks >= 40 * secs, `only ${chunks} chunks in ${fmt(secs, 1)} s`);
    } finally {
      await page.evaluate(() => { window.fc.options.micMode = 'auto'; });
    }
  });

  test('speaking: >= 24 fps decoded while speaking, audio flows, SSE start/end, lips move then rest', async (t) => {
    await startMouthSampler(page, hz.mouth, hz.width, hz.height);
    await delay(1000); /* some idle samples before the sentence */
    const since = await speechCount();
    const s0 = await stats();
    const t0 = await pageTime(page);
    await page.evaluate((text) => window.fc.say(text), SENTENCE);
    const start = await waitSpeech('start', since);
    const sA = await stats(); /* the speaking part: every frame is new, 25 fps */
    const end = await waitSpeech('end', since);
    const sB = await stats();
    assert.equal(end.id, start.id, 'start and end name the same utterance');
    assert.ok(end.t - start.t > 1500, `utterance lasted ${fmt(end.t - start.t, 0)} ms`);
    /* A 5 s window from the request on, covering speech and idle frames alike. */
    const t1 = t0 + 5000;
    const now = await pageTime(page);
    if (now < t1) await delay(t1 - now);
    const s1 = await stats();
    /* And the lips' rest after the end (+0.5 s margin, 1 s of samples). */
    const restEnd = end.t + 1500;
    const now2 = await pageTime(page);
    if (now2 < restEnd) await delay(restEnd - now2 + 50);
    const samples = await stopMouthSampler(page);

    const secs = (s1.t - s0.t) / 1000;
    /* at rest a still photo is re-sent 5 times a second (the picture stands), so the rate is
     * measured while speaking; the whole window says what the viewer got on average */
    const fps = (sB.video.framesDecoded - sA.video.framesDecoded) / ((sB.t - sA.t) / 1000);
    const fpsAll = (s1.video.framesDecoded - s0.video.framesDecoded) / secs;
    const audioPackets = s1.audio.packetsReceived - s0.audio.packetsReceived;
    const speaking = motion(samples, start.t, end.t);
    const rest = motion(samples, end.t + 500, end.t + 1500);
    t.diagnostic(`speaking: ${fmt(fps)} fps decoded over ${fmt((sB.t - sA.t) / 1000)} s; ` +
      `${fmt(secs)} s window (speech and rest): ${fmt(fpsAll)} fps, ${audioPackets} audio packets, ` +
      `video lost ${s1.video.packetsLost}, jitter ${fmt(s1.video.jitterMs, 1)} ms, ` +
      `jitter buffer ${fmt(s1.video.jitterBufferMs, 0)} ms (cumulative), RTT ${fmt(s1.rttMs, 1)} ms`);
    t.diagnostic(`utterance ${start.id}: ${fmt(end.t - start.t, 0)} ms; mouth motion speaking ` +
      `${fmt(speaking.mean)} (n=${speaking.n}), at rest ${fmt(rest.mean)} (n=${rest.n}), ratio ` +
      `${fmt(speaking.mean / rest.mean, 1)}`);
    assert.ok(secs >= 4.9, `window ${secs} s`);
    assert.ok(fps >= 24, `decoded ${fmt(fps)} fps while speaking`);
    assert.ok(fpsAll > 5, `decoded ${fmt(fpsAll)} fps over the whole window`);
    assert.ok(audioPackets > 100, `audio packets received in the window: ${audioPackets}`);
    assert.ok(speaking.n >= 20 && rest.n >= 15, `samples: speaking ${speaking.n}, rest ${rest.n}`);
    assert.ok(speaking.mean > MOTION_FLOOR, `mouth motion while speaking ${fmt(speaking.mean)} <= ${MOTION_FLOOR}`);
    assert.ok(speaking.mean > MOTION_RATIO * rest.mean,
      `mouth motion while speaking ${fmt(speaking.mean)} is not > ${MOTION_RATIO}× rest ${fmt(rest.mean)}`);
    assert.equal(await page.evaluate(() => window.fc.isSpeaking()), false, 'is_speaking after the end event');
    assert.equal(await page.evaluate(() => window.fc.state.speaking), false, 'the page shows silence');
  });

  test('interrupt: the SSE end arrives within 0.5 s and is_speaking turns false', async (t) => {
    const since = await speechCount();
    await page.evaluate((text) => window.fc.say(text), LONG_SENTENCE);
    const start = await waitSpeech('start', since);
    assert.equal(await page.evaluate(() => window.fc.state.speaking), true, 'the page shows speaking');
    assert.equal(await page.evaluate(() => window.fc.isSpeaking()), true, 'is_speaking while speaking');
    const now = await pageTime(page);
    if (now < start.t + 1000) await delay(start.t + 1000 - now);
    const tInt = await pageTime(page);
    await page.evaluate(() => window.fc.interrupt());
    const end = await waitSpeech('end', since, 3000);
    const lag = end.t - tInt;
    const speakingAfter = await page.evaluate(() => window.fc.isSpeaking());
    const tChecked = await pageTime(page);
    t.diagnostic(`interrupted utterance ${start.id} after ${fmt(tInt - start.t, 0)} ms: SSE end ` +
      `${fmt(lag, 0)} ms after the request; is_speaking ${speakingAfter} at +${fmt(tChecked - tInt, 0)} ms`);
    assert.equal(end.id, start.id);
    assert.ok(lag <= 500, `SSE end came ${fmt(lag, 0)} ms after /interrupt_talk`);
    assert.equal(speakingAfter, false, 'is_speaking right after the end event');
  });

  test('say with interrupt: true cuts the sentence being spoken', async (t) => {
    const since = await speechCount();
    await page.evaluate((text) => window.fc.say(text), LONG_SENTENCE);
    const first = await waitSpeech('start', since);
    const tSay = await pageTime(page);
    await page.evaluate(() => window.fc.say('Stop.', true));
    const events = await waitFor(() => page.evaluate((since) => {
      const ev = window.fc.state.speechEvents.slice(since);
      const starts = ev.filter((e) => e.type === 'start');
      const ends = ev.filter((e) => e.type === 'end');
      return starts.length >= 2 && ends.length >= 2 && ev;
    }, since), { timeoutMs: 8000, what: 'start/end of both utterances' });
    const firstEnd = events.find((e) => e.type === 'end' && e.id === first.id);
    const second = events.find((e) => e.type === 'start' && e.id !== first.id);
    t.diagnostic(`first utterance ended ${fmt(firstEnd.t - tSay, 0)} ms after the interrupting request; ` +
      `the second started ${fmt(second.t - tSay, 0)} ms after it`);
    assert.ok(firstEnd, 'the first utterance ends');
    assert.ok(firstEnd.t - tSay < 1500, `first utterance cut ${fmt(firstEnd.t - tSay, 0)} ms after the request`);
    assert.ok(second && second.t >= firstEnd.t, 'the new sentence starts after the cut one ended');
  });

  test('microphone after a spoken sentence still moves the lips', async (t) => {
    await micCheck(t);
  });

  test('errors from the server are shown on the page', async (t) => {
    const id = await page.evaluate(() => window.fc.state.sessionid);
    /* type "chat" is not configured: 501 with a msg. */
    const r = await page.evaluate((sid) => window.fc.api('/human', { sessionid: sid, text: 'hi', type: 'chat' })
      .then(() => null, (e) => ({ status: e.status, msg: e.serverMsg })), id);
    assert.equal(r && r.status, 501);
    assert.match(r.msg, /chat/);
    /* Through the UI: Record twice on the server's side makes the second a 409 shown in #error. */
    await postOk(`${srv.url}/record`, { sessionid: id, type: 'start_record' });
    await page.click('#record');
    await page.waitForSelector('#error:not([hidden])', { timeout: 5000 });
    const shown = await page.textContent('#error-text');
    assert.match(shown, /already recording/);
    await page.click('#error-close');
    await postOk(`${srv.url}/record`, { sessionid: id, type: 'end_record' });
  });

  test('disconnect frees the session and leaves no page errors', async (t) => {
    await page.click('#disconnect');
    await waitFor(() => page.evaluate(() => !window.fc.state.connected), { what: 'the page to disconnect' });
    assert.equal((await health(srv.url)).sessions, 0);
    const st = await page.evaluate(() => ({ connected: window.fc.state.connected, id: window.fc.state.sessionid }));
    assert.deepEqual(st, { connected: false, id: null });
    assert.equal(await page.isDisabled('#connect'), false);
    /* HTTP errors provoked above log "Failed to load resource"; anything else is a bug. */
    assert.deepEqual(page.fcErrors.filter((e) => !/Failed to load resource/.test(e)), []);
  });

  test('a session the server closes shows as lost on the page', async (t) => {
    const id = await page.evaluate(() => window.fc.connect());
    const r = await request('DELETE', `${srv.url}/session/${id}`);
    assert.equal(r.status, 200, r.text());
    const t0 = Date.now();
    await waitFor(() => page.evaluate(() => !window.fc.state.connected), { timeoutMs: 15000, what: 'the page to notice' });
    t.diagnostic(`the page noticed the closed session after ${Date.now() - t0} ms`);
    assert.match(await page.textContent('#error-text'), new RegExp(`session ${id}: `));
    assert.equal(await page.isDisabled('#connect'), false);
  });
});
