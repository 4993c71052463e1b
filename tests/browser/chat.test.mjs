/* The page's conversation in Chromium: a typed question answered by the LLM (a fake that speaks
 * OpenAI's streaming chat protocol), then voice chat — Chromium's fake microphone playing a WAV
 * espeak-ng made of a spoken question (--use-file-for-fake-audio-capture), through the page's
 * AudioWorklet to /ws/audio?mode=chat, heard by the server's pocketsphinx, answered — with both
 * sides in the transcript, each turn's timeline shown, and the avatar speaking; the page names
 * the server's voice, ears and LLM, and offers its voices to pick. */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { closeBrowser, launchBrowser, openPage, stopClean, waitFor, wavBuffer } from './helpers.mjs';
import { facecastBin, startServer } from './server.mjs';

const ANSWER = ['Sunny and warm today.', 'Take a hat.'];

/* An OpenAI-compatible chat completions endpoint that streams ANSWER in small pieces. */
function fakeLlm() {
  const asked = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      const j = JSON.parse(body || '{}');
      asked.push(j.messages[j.messages.length - 1].content);
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
      const text = ANSWER.join(' ');
      const pieces = text.match(/.{1,5}/g);
      let i = 0;
      const chunk = (delta, finish = null) => `data: ${JSON.stringify({
        id: 'c', object: 'chat.completion.chunk', created: 1, model: 'fake',
        choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.write(chunk({ role: 'assistant', content: '' }));
      const timer = setInterval(() => {
        if (i < pieces.length) { res.write(chunk({ content: pieces[i++] })); return; }
        clearInterval(timer);
        res.write(chunk({}, 'stop'));
        res.end('data: [DONE]\n\n');
      }, 10);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () =>
    resolve({ url: `http://127.0.0.1:${server.address().port}/v1`, asked, close: () => server.close() })));
}

/* The question as a fake microphone plays it: 1 s of quiet, the speech, 3 s of quiet, at
 * 48 kHz (the device's rate: the page resamples it to 16 kHz). */
function questionWav(dir) {
  const said = path.join(dir, 'q.wav');
  execFileSync(facecastBin(), ['say', 'what is the weather like today', '-o', said, '--voice', 'en-us+klatt', '--rate', '48000']);
  const pcm = fs.readFileSync(said).subarray(44);
  const speech = new Float32Array(pcm.length / 2);
  for (let i = 0; i < speech.length; i++) speech[i] = pcm.readInt16LE(2 * i) / 32768;
  const all = new Float32Array(48000 + speech.length + 3 * 48000);
  all.set(speech, 48000);
  const out = path.join(dir, 'mic.wav');
  fs.writeFileSync(out, wavBuffer(all, 48000));
  return out;
}

describe('conversation on the page', () => {
  let srv, browser, page, llm, dir;

  before(async () => {
    llm = await fakeLlm();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fc_chat_page_'));
    const wav = questionWav(dir);
    srv = await startServer({ args: ['--llm-url', llm.url] });
    browser = await launchBrowser([`--use-file-for-fake-audio-capture=${wav}%noloop`]);
    page = await openPage(browser, srv.url);
    await page.click('#connect');
    await waitFor(() => page.evaluate(() => window.fc.state.connected), { what: 'connected', timeoutMs: 20000 });
  });

  after(async () => {
    await closeBrowser(browser);
    if (srv) await stopClean(srv);
    if (llm) llm.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  const transcript = () => page.evaluate(() => window.fc.state.transcript.map(({ who, text, how, turn }) => ({ who, text, how, turn })));

  test('a typed question in chat mode: both sides in the transcript, the timeline shown', async () => {
    await waitFor(async () => /voice: espeak · ears: pocketsphinx · chat: LLM/.test(await page.textContent('#engines')),
      { what: 'the engines line (from /healthz)' });
    const voices = await page.$$eval('#voices option', (os) => os.map((o) => o.value));
    assert.ok(voices.includes('zh') && voices.includes('en-us'), `espeak's voices to pick from: ${voices}`);
    await page.selectOption('#say-mode', 'chat');
    await page.fill('#text', 'How is the weather?');
    await page.click('#send');
    await waitFor(async () => (await transcript()).some((l) => l.who === 'avatar' && l.text === ANSWER.join(' ')),
      { what: 'the answer in the transcript', timeoutMs: 15000 });
    const lines = await transcript();
    assert.deepEqual(lines.slice(0, 2).map((l) => [l.who, l.how]), [['you', 'typed'], ['avatar', null]]);
    assert.equal(lines[0].text, 'How is the weather?');
    await waitFor(() => page.evaluate(() => window.fc.state.timeline !== null), { what: 'the timeline' });
    const shown = await page.textContent('#timeline');
    assert.match(shown, /typed: from the request\): first token \d+ · first sentence \d+ · first audio \d+ · first frame \d+ ms/);
    await waitFor(async () => !(await page.evaluate(() => window.fc.isSpeaking())), { what: 'quiet', timeoutMs: 20000 });
  });

  test('voice chat: the fake microphone asks, pocketsphinx hears it, the avatar answers', async (t) => {
    const since = await page.evaluate(() => window.fc.state.speechEvents.length);
    await page.click('#talk');
    await waitFor(() => page.evaluate(() => window.fc.state.micListen === 'chat'), { what: 'talking' });
    await waitFor(async () => (await transcript()).some((l) => l.who === 'you' && l.how === 'spoken'),
      { what: 'the spoken question in the transcript', timeoutMs: 20000 });
    const heard = (await transcript()).find((l) => l.how === 'spoken').text;
    t.diagnostic(`heard: "${heard}"; the LLM was asked: ${JSON.stringify(llm.asked)}`);
    assert.match(heard, /weather/);
    assert.equal(llm.asked[llm.asked.length - 1], heard, 'the transcript is what the LLM is asked');
    await waitFor(async () => {
      const l = await transcript();
      return l.length >= 4 && l[l.length - 1].who === 'avatar' && l[l.length - 1].text === ANSWER.join(' ');
    }, { what: 'the spoken turn answered', timeoutMs: 15000 });
    await waitFor(() => page.evaluate(() => window.fc.state.timeline && window.fc.state.timeline.asr_ms !== null),
      { what: 'the spoken turn\'s timeline' });
    const tl = await page.evaluate(() => window.fc.state.timeline);
    const order = ['asr_ms', 'llm_first_token_ms', 'first_sentence_ms', 'first_audio_ms', 'first_frame_ms'].map((k) => tl[k]);
    t.diagnostic(`timeline after the end of speech: ${JSON.stringify(tl)}`);
    assert.deepEqual(order, [...order].sort((a, b) => a - b), 'milestones in order');
    assert.match(await page.textContent('#timeline'), /spoken: from the end of your speech\): heard \d+ · first token/);
    await page.evaluate((since) => window.fc.waitSpeech('start', { since, timeoutMs: 15000 }), since);
    await page.click('#talk');
    await waitFor(() => page.evaluate(() => !window.fc.state.mic), { what: 'talking stopped' });
    assert.deepEqual(await page.evaluate(() => window.fc.state.lastError), null);
    assert.deepEqual(page.fcErrors.filter((e) => !/Failed to load resource/.test(e)), []);
  });
});
