/* Starts and stops `facecast serve` for the browser tests.
 *
 * The binary comes from $FACECAST_BIN, else the first non-option argument, else build/facecast
 * under the repository root. The server listens on 127.0.0.1 with port 0 (any free port); its
 * port is read from the "serving on http://…:PORT/" line it prints on stderr. stop() sends
 * SIGTERM, then SIGKILL after 5 s, and reports how it ended. */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export function facecastBin() {
  const arg = process.argv.slice(2).find((a) => !a.startsWith('-') && !a.endsWith('.mjs'));
  const bin = process.env.FACECAST_BIN || arg || path.join(repoRoot, 'build', 'facecast');
  return path.resolve(bin);
}

const running = new Set();
process.on('exit', () => {
  for (const p of running) {
    try { p.kill('SIGKILL'); } catch { /* already gone */ }
  }
});

/* Resolves with {url, port, pid, log(), stop()} once the server listens. */
export async function startServer({ args = [], bin = facecastBin(), timeoutMs = 30000 } = {}) {
  if (!fs.existsSync(bin)) throw new Error(`facecast binary not found: ${bin} (set FACECAST_BIN)`);
  const proc = spawn(bin, ['serve', '--host', '127.0.0.1', '--port', '0', '--quiet', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(proc);
  let log = '';
  const keep = (d) => {
    log += d;
    if (log.length > 2e6) log = log.slice(-1e6);
  };
  proc.stdout.setEncoding('utf8');
  proc.stderr.setEncoding('utf8');
  proc.stdout.on('data', keep);
  proc.stderr.on('data', keep);
  const exited = new Promise((resolve) => {
    proc.once('exit', (code, signal) => {
      running.delete(proc);
      resolve({ code, signal });
    });
  });

  let port;
  try {
    port = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(
        `facecast serve printed no "serving on" line within ${timeoutMs / 1000} s:\n${log}`)), timeoutMs);
      const check = () => {
        const m = /serving on http:\/\/[^\s/]+:(\d+)\//.exec(log);
        if (m) {
          clearTimeout(timer);
          proc.stderr.off('data', check);
          resolve(Number(m[1]));
        }
      };
      proc.stderr.on('data', check);
      proc.once('error', (e) => { clearTimeout(timer); reject(e); });
      exited.then(({ code, signal }) => {
        clearTimeout(timer);
        reject(new Error(`facecast serve exited (${code ?? signal}) before listening:\n${log}`));
      });
    });
  } catch (e) {
    await stopProcess(proc, exited);
    throw e;
  }

  return {
    port,
    url: `http://127.0.0.1:${port}`,
    pid: proc.pid,
    log: () => log,
    exited,
    /* Resolves with {code, signal, killed}: killed when SIGTERM did not end it within 5 s. */
    stop: () => stopProcess(proc, exited),
  };
}

async function stopProcess(proc, exited) {
  if (proc.exitCode !== null || proc.signalCode !== null) return { ...(await exited), killed: false };
  proc.kill('SIGTERM');
  let timer;
  const late = new Promise((resolve) => { timer = setTimeout(() => resolve('late'), 5000); });
  const first = await Promise.race([exited, late]);
  clearTimeout(timer);
  if (first !== 'late') return { ...first, killed: false };
  proc.kill('SIGKILL');
  return { ...(await exited), killed: true };
}
