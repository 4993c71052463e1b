/* WebRTC behind firewalls, in Chromium (run by tests/e2e_turn.sh, not e2e_browser: it needs
 * coturn).
 *
 * TURN: Debian's coturn (as this user, on a free port, with a config in a temporary folder,
 * time-limited credentials from a shared secret), facecast with --turn and $TURN_SECRET, and
 * the page with ?relay=1 (iceTransportPolicy "relay": the browser offers relayed candidates
 * only, as behind a firewall that lets nothing else through). It fetches the credentials from
 * GET /api/ice-servers, connects, the avatar speaks, frames and sound arrive, and getStats'
 * selected candidate pair is relayed on the browser's side. A page given a wrong TURN password
 * gathers no relayed candidate at all, so the relay is what carried the media.
 *
 * ICE-TCP: a second page whose UDP candidates are taken out of both the offer and the answer
 * (what a network that lets no UDP through leaves of ICE; a real firewall rule needs root)
 * still connects, over the server's passive TCP candidate, and plays. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  closeBrowser, delay, health, launchBrowser, openPage, request, stopClean, waitFor,
} from './helpers.mjs';
import { startServer } from './server.mjs';

const SECRET = 'browser-turn-test-secret';

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/* turnserver on 127.0.0.1:port, REST-API credentials (use-auth-secret). Every peer is on this
 * machine, so loopback peers are allowed (never in production). */
async function startCoturn(dir, port) {
  const conf = path.join(dir, 'turnserver.conf');
  fs.writeFileSync(conf, [
    'listening-ip=127.0.0.1', 'relay-ip=127.0.0.1', `listening-port=${port}`,
    'realm=facecast.test', 'fingerprint', 'use-auth-secret', `static-auth-secret=${SECRET}`,
    'no-tls', 'no-dtls', 'no-cli', 'no-multicast-peers', 'allow-loopback-peers',
    `log-file=${dir}/turn.log`, 'simple-log', 'verbose', 'no-stdout-log',
    `pidfile=${dir}/turn.pid`, `userdb=${dir}/turndb`, '',
  ].join('\n'));
  const proc = spawn('turnserver', ['-c', conf], { stdio: 'ignore' });
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  await waitFor(() => new Promise((resolve) => {
    if (proc.exitCode !== null) return resolve(false);
    const c = net.connect(port, '127.0.0.1', () => { c.destroy(); resolve(true); });
    c.on('error', () => resolve(false));
  }), { timeoutMs: 10000, what: `turnserver listening on ${port}` });
  return {
    log: () => { try { return fs.readFileSync(`${dir}/turn.log`, 'utf8'); } catch { return ''; } },
    stop: async () => { proc.kill('SIGTERM'); await exited; },
  };
}

describe('WebRTC behind firewalls: TURN only, TCP only', () => {
  let dir, turn, srv, browser, page, turnPort;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fc-turn-'));
    turnPort = await freePort();
    turn = await startCoturn(dir, turnPort);
    process.env.TURN_SECRET = SECRET; /* inherited by the server only */
    try {
      srv = await startServer({ args: ['--turn', `turn://127.0.0.1:${turnPort}`] });
    } finally {
      delete process.env.TURN_SECRET;
    }
    browser = await launchBrowser();
    page = await openPage(browser, srv.url, '?relay=1');
  });

  after(async () => {
    await closeBrowser(browser);
    if (srv) await stopClean(srv);
    if (turn) await turn.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('GET /api/ice-servers hands out coturn with time-limited credentials', async () => {
    const r = await request('GET', `${srv.url}/api/ice-servers`);
    assert.equal(r.status, 200);
    const servers = r.json().iceServers;
    assert.deepEqual(servers.map((s) => s.urls[0]),
      [`turn:127.0.0.1:${turnPort}?transport=udp`, `turn:127.0.0.1:${turnPort}?transport=tcp`]);
    assert.match(servers[0].username, /^\d+:facecast$/);
    assert.ok(servers[0].credential && servers[0].credential !== SECRET);
  });

  test('relay only: connects, speaks, frames and sound arrive over the TURN relay', async (t) => {
    const id = await page.evaluate(() => window.fc.connect());
    assert.match(id, /^[0-9A-Za-z_-]+$/, 'session id');
    const hz = await health(srv.url);
    const first = await waitFor(async () => {
      const x = await page.evaluate(() => window.fc.getStats());
      return x && x.video && x.video.framesDecoded >= 10 && x.route && x;
    }, { timeoutMs: 15000, what: '10 decoded frames and a selected candidate pair' });
    assert.equal(first.video.width, hz.width);
    t.diagnostic(`selected pair: ${JSON.stringify(first.route)}`);
    assert.equal(first.route.local.type, 'relay', 'the browser\'s end of the pair is a TURN relay');

    const since = await page.evaluate(() => window.fc.state.speechEvents.length);
    await page.evaluate(() => window.fc.say('Hello through the relay. Can you hear me now?'));
    await page.evaluate(({ since }) => window.fc.waitSpeech('start', { since, timeoutMs: 20000 }), { since });
    const before = await page.evaluate(() => window.fc.getStats());
    await delay(2000);
    const during = await page.evaluate(() => window.fc.getStats());
    const frames = during.video.framesDecoded - before.video.framesDecoded;
    const packets = during.audio.packetsReceived - before.audio.packetsReceived;
    t.diagnostic(`speaking through the relay: ${frames} frames decoded and ${packets} audio packets in 2 s`);
    assert.ok(frames >= 25, `only ${frames} frames decoded in 2 s of speech`);
    assert.ok(packets >= 25, `only ${packets} audio packets in 2 s of speech`);
    assert.ok(during.audio.audioLevel > 0 || during.audio.totalSamplesReceived > before.audio.totalSamplesReceived,
      'sound arrives');
    assert.equal(during.route.local.type, 'relay');
    await page.evaluate(({ since }) => window.fc.waitSpeech('end', { since, timeoutMs: 20000 }), { since });
    assert.match(turn.log(), /ALLOCATE processed, success/, 'coturn allocated a relay');
    assert.deepEqual(page.fcErrors, []);
  });

  test('ICE-TCP: without UDP candidates on either side the page connects over TCP and plays', async (t) => {
    const tcpPage = await openPage(browser, srv.url);
    try {
      await tcpPage.evaluate(() => {
        const udp = /^a=candidate:\S+ \d+ udp /i;
        const tcpOnly = (sdp) => sdp.split('\r\n').filter((l) => !udp.test(l)).join('\r\n');
        const orig = window.fetch;
        window.fetch = async (url, init) => {
          if (url !== '/offer') return orig(url, init);
          const body = JSON.parse(init.body);
          body.sdp = tcpOnly(body.sdp);
          const r = await orig(url, { ...init, body: JSON.stringify(body) });
          const j = await r.json();
          if (j.sdp) j.sdp = tcpOnly(j.sdp);
          return new Response(JSON.stringify(j), { status: r.status, headers: { 'Content-Type': 'application/json' } });
        };
      });
      await tcpPage.evaluate(() => window.fc.connect());
      const s = await waitFor(async () => {
        const x = await tcpPage.evaluate(() => window.fc.getStats());
        return x && x.video && x.video.framesDecoded >= 25 && x.route && x;
      }, { timeoutMs: 15000, what: '25 decoded frames over TCP' });
      t.diagnostic(`selected pair: ${JSON.stringify(s.route)}, ${s.video.framesDecoded} frames`);
      assert.equal(s.route.local.protocol, 'tcp');
      assert.equal(s.route.remote.protocol, 'tcp');
      assert.equal(s.route.remote.type, 'host', 'the server\'s passive TCP candidate');
      assert.ok(s.audio && s.audio.packetsReceived > 0, 'sound over TCP too');
      assert.deepEqual(tcpPage.fcErrors, []);
    } finally {
      await tcpPage.evaluate(() => window.fc.disconnect('delete')).catch(() => {});
      await tcpPage.context().close();
    }
  });

  test('a wrong TURN password gathers no relayed candidate: the relay is the only way', async () => {
    const n = await page.evaluate(async (port) => {
      const pc = new RTCPeerConnection({
        iceTransportPolicy: 'relay',
        iceServers: [{ urls: `turn:127.0.0.1:${port}?transport=udp`, username: `${Math.floor(Date.now() / 1000) + 600}:facecast`, credential: 'wrong' }],
      });
      pc.addTransceiver('video', { direction: 'recvonly' });
      const found = [];
      const done = new Promise((resolve) => {
        pc.onicecandidate = (e) => { if (e.candidate && e.candidate.candidate) found.push(e.candidate.candidate); else if (!e.candidate) resolve(); };
        setTimeout(resolve, 8000);
      });
      await pc.setLocalDescription(await pc.createOffer());
      await done;
      pc.close();
      return found.length;
    }, turnPort);
    assert.equal(n, 0, 'relayed candidates with a wrong password');
  });
});
