/* Session churn and limits: 20 sessions opened from the page and closed in turn (half by
 * pc.close(), half by DELETE /session/<id>) leave the server's open file descriptors and RSS
 * where they were; with --max-sessions 2 a third offer gets 503 with a JSON msg, which the
 * page shows.
 *
 * Tolerances: fds must come back to the baseline within FD_TOLERANCE = 2 (every socket,
 * eventfd and pipe of a session is closed with it; the test's own HTTP requests use one
 * connection each, closed after, and each browser phase runs in its own context, closed
 * before measuring, so no keep-alive connection is counted; the 2 spare cover a socket the
 * server's loop has not reaped yet — a leak of even one fd per session shows as 20). RSS may
 * grow by at most RSS_TOLERANCE_KB (25 MB, 1.25 MB a session) over a baseline taken after one
 * warm-up session (plugin loading, the first x264 encoder and the allocator's arenas are in the
 * baseline). */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  closeBrowser, delay, fdCount, fdList, health, launchBrowser, openPage, request, rssKb,
  stopClean, waitFor,
} from './helpers.mjs';
import { startServer } from './server.mjs';

const SESSIONS = 20;
const FD_TOLERANCE = 2;
const RSS_TOLERANCE_KB = 25 * 1024;
const CLOSE_FREE_MS = 15000; /* the server notices a closed peer connection within this */

/* Opens a session from the page and waits for a few decoded frames; resolves with its id. */
async function open(page) {
  const id = await page.evaluate(() => window.fc.connect());
  await waitFor(() => page.evaluate(async () => {
    const s = await window.fc.getStats();
    return s && s.video && s.video.framesDecoded >= 5;
  }), { timeoutMs: 10000, what: '5 decoded frames' });
  return id;
}

/* Resolves with the ms until /healthz counts no session, or null after timeoutMs. */
async function freedWithin(base, t0, timeoutMs) {
  for (;;) {
    if ((await health(base)).sessions === 0) return Date.now() - t0;
    if (Date.now() - t0 > timeoutMs) return null;
    await delay(50);
  }
}

/* Waits until the fd count stops changing (same value for 1.5 s, at most 10 s), or reaches
 * `target`; returns it. Sockets closed by the peer are released by the server's loop shortly
 * after, so a reading right after the last request would be early, not wrong. */
async function settledFds(pid, target) {
  let last = fdCount(pid), since = Date.now();
  const end = Date.now() + 10000;
  while (Date.now() < end) {
    await delay(250);
    const n = fdCount(pid);
    if (n !== last) {
      last = n;
      since = Date.now();
    }
    if (n === target || Date.now() - since >= 1500) break;
  }
  return last;
}

describe('session churn', () => {
  let srv, browser;

  before(async () => {
    srv = await startServer();
    browser = await launchBrowser();
  });

  after(async () => {
    await closeBrowser(browser);
    if (srv) await stopClean(srv);
  });

  test(`${SESSIONS} sessions in turn leave fds and RSS where they were`, async (t) => {
    /* Warm-up: one session, then the baseline. */
    let page = await openPage(browser, srv.url);
    await open(page);
    await page.evaluate(() => window.fc.disconnect('delete'));
    await page.context().close();
    await waitFor(async () => (await health(srv.url)).sessions === 0, { what: '0 sessions' });
    const fd0 = await settledFds(srv.pid, -1);
    const fdNames0 = fdList(srv.pid);
    const rss0 = rssKb(srv.pid);

    page = await openPage(browser, srv.url);
    const freed = { close: [], delete: [] };
    const notFreed = [];
    let closeWait = CLOSE_FREE_MS;
    for (let i = 0; i < SESSIONS; i++) {
      const how = i % 2 ? 'delete' : 'close';
      const id = await open(page);
      const t0 = Date.now();
      await page.evaluate((h) => window.fc.disconnect(h), how);
      const ms = await freedWithin(srv.url, t0, how === 'close' ? closeWait : 2000);
      if (ms !== null) {
        freed[how].push(ms);
        continue;
      }
      /* Not freed: note it, free it by DELETE so the churn (and the fd/RSS check) goes on,
       * and wait less for the next ones. */
      notFreed.push(`${id} (${how})`);
      closeWait = 2000;
      const r = await request('DELETE', `${srv.url}/session/${id}`);
      assert.equal(r.status, 200, `DELETE /session/${id} after ${how}: ${r.text()}`);
    }
    await page.context().close();
    await waitFor(async () => (await health(srv.url)).sessions === 0, { what: '0 sessions' });
    const fd1 = await settledFds(srv.pid, fd0);
    const rss1 = rssKb(srv.pid);
    const max = (xs) => (xs.length ? `≤ ${Math.max(...xs)} ms` : 'never');
    t.diagnostic(`${SESSIONS} sessions: freed after pc.close() ${max(freed.close)} ` +
      `(${freed.close.length}/${SESSIONS / 2}), after DELETE ${max(freed.delete)} ` +
      `(${freed.delete.length}/${SESSIONS / 2}); fds ${fd0} → ${fd1} (Δ ${fd1 - fd0}); RSS ` +
      `${(rss0 / 1024).toFixed(1)} → ${(rss1 / 1024).toFixed(1)} MB (Δ ${((rss1 - rss0) / 1024).toFixed(1)} MB)`);
    /* New fds by kind (socket, eventfd, pipe, file), for the message. */
    const kinds = {};
    for (const f of fdList(srv.pid).filter((x) => !fdNames0.includes(x))) {
      const k = f.split(' -> ')[1].replace(/\[\d+\]$/, '').replace(/:$/, '');
      kinds[k] = (kinds[k] || 0) + 1;
    }
    assert.ok(Math.abs(fd1 - fd0) <= FD_TOLERANCE,
      `open fds ${fd0} → ${fd1} after ${SESSIONS} sessions; new ones: ${JSON.stringify(kinds)}`);
    assert.ok(rss1 - rss0 <= RSS_TOLERANCE_KB,
      `RSS grew by ${((rss1 - rss0) / 1024).toFixed(1)} MB over ${SESSIONS} sessions (limit ${RSS_TOLERANCE_KB / 1024} MB)`);
    assert.deepEqual(notFreed, [], `sessions the server did not free within ${CLOSE_FREE_MS / 1000} s of pc.close() ` +
      '(or 2 s of DELETE)');
  });
});

describe('max sessions', () => {
  let srv, browser;

  before(async () => {
    srv = await startServer({ args: ['--max-sessions', '2'] });
    browser = await launchBrowser();
  });

  after(async () => {
    await closeBrowser(browser);
    if (srv) await stopClean(srv);
  });

  test('with --max-sessions 2 a third offer gets 503 with a JSON msg, shown by the page', async (t) => {
    const p1 = await openPage(browser, srv.url);
    const p2 = await openPage(browser, srv.url);
    const p3 = await openPage(browser, srv.url);
    await p1.evaluate(() => window.fc.connect());
    await p2.evaluate(() => window.fc.connect());
    const hz = await health(srv.url);
    assert.equal(hz.sessions, 2);
    assert.equal(hz.max_sessions, 2);

    /* A valid offer from the browser, posted directly to see the status and body. */
    const sdp = await p3.evaluate(async () => {
      const pc = new RTCPeerConnection();
      pc.addTransceiver('video', { direction: 'recvonly' });
      pc.addTransceiver('audio', { direction: 'recvonly' });
      await pc.setLocalDescription(await pc.createOffer());
      const text = pc.localDescription.sdp;
      pc.close();
      return text;
    });
    const r = await request('POST', `${srv.url}/offer`, { json: { sdp, type: 'offer' } });
    t.diagnostic(`third /offer: HTTP ${r.status} ${r.text()}`);
    assert.equal(r.status, 503);
    assert.match(String(r.headers['content-type']), /^application\/json/);
    const body = r.json();
    assert.equal(body.code, -1);
    assert.equal(typeof body.msg, 'string');
    assert.ok(body.msg.length > 0, 'msg is not empty');

    /* The page's Connect shows the server's msg. */
    await p3.click('#connect');
    await p3.waitForSelector('#error:not([hidden])', { timeout: 10000 });
    assert.ok((await p3.textContent('#error-text')).includes(body.msg), 'the page shows the msg');
    assert.equal(await p3.evaluate(() => window.fc.state.connected), false);
    assert.equal(await p3.isDisabled('#connect'), false, 'Connect can be tried again');

    /* A freed slot takes the next session. */
    await p1.evaluate(() => window.fc.disconnect('delete'));
    assert.equal((await health(srv.url)).sessions, 1);
    await p3.evaluate(() => window.fc.connect());
    assert.equal((await health(srv.url)).sessions, 2);
    await p2.evaluate(() => window.fc.disconnect('delete'));
    await p3.evaluate(() => window.fc.disconnect('delete'));
    assert.equal((await health(srv.url)).sessions, 0);
  });
});

describe('shutdown', () => {
  test('SIGTERM with a live session (SSE and microphone WebSocket open) exits cleanly', async (t) => {
    const srv = await startServer();
    const browser = await launchBrowser();
    try {
      const page = await openPage(browser, srv.url);
      await page.evaluate(() => window.fc.connect());
      await page.click('#mic');
      await waitFor(() => page.evaluate(() => window.fc.state.micChunks > 10), { what: 'microphone chunks' });
      await stopClean(srv);
    } finally {
      await browser.close();
      await srv.stop();
    }
  });
});
