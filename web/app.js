/* facecast web client (ES module, no build step, Chromium and Firefox).
 *
 * Receives the avatar from `facecast serve` over WebRTC (we offer recvonly H.264 video + Opus
 * audio, the server answers; no trickle ICE: the offer waits for its candidates), and drives it
 * through LiveTalking's HTTP API: /human (text, repeated or answered by the LLM), /interrupt_talk,
 * /record, /sse (speech start/end; the conversation's chat, listen and tts events), and
 * /ws/audio (microphone as 16 kHz mono PCM16 LE in 20 ms chunks, from an AudioWorklet, or a
 * ScriptProcessorNode where AudioWorklet is missing: lip-synced, or heard for voice chat with
 * mode=chat). The conversation panel shows both sides and each turn's timeline. getStats feeds
 * the figures once a second. Everything is also reachable as `window.fc` (tests, the console). */

const $ = (id) => document.getElementById(id);
const ui = {
  status: $('status'), session: $('session'), error: $('error'), errorText: $('error-text'),
  errorClose: $('error-close'), video: $('video'), speaking: $('speaking'),
  connect: $('connect'), disconnect: $('disconnect'), muted: $('muted'),
  form: $('say-form'), text: $('text'), send: $('send'), interruptCheck: $('interrupt-check'),
  interrupt: $('interrupt'), mic: $('mic'), micLevel: $('mic-level'), record: $('record'),
  talk: $('talk'), sayMode: $('say-mode'), voice: $('voice'), emotion: $('emotion'),
  transcript: $('transcript'), timeline: $('timeline'), engines: $('engines'),
  download: $('download'), log: $('log'), apiKey: $('api-key'),
  st: {
    fps: $('st-fps'), decoded: $('st-decoded'), res: $('st-res'), lost: $('st-lost'),
    jitter: $('st-jitter'), jbuf: $('st-jbuf'), rtt: $('st-rtt'),
  },
};

/* ?mic=scriptprocessor forces the ScriptProcessorNode fallback (tests, old browsers). */
const options = { micMode: new URLSearchParams(location.search).get('mic') || 'auto' };

const MIC_RATE = 16000;
const MIC_CHUNK = 320; /* samples: 20 ms at 16 kHz */
const CONNECT_TIMEOUT_MS = 15000;
const ICE_GATHER_MS = 2000;

/* What tests read: plain data, updated in place. */
const state = {
  sessionid: null,
  connecting: false,
  connected: false,
  speaking: false,
  speechEvents: [], /* {sessionid, type: 'start'|'end', id, t: performance.now() at arrival} */
  stats: null,      /* the last once-a-second summary (see summarize()) */
  statsCount: 0,
  recording: false,
  recordingUrl: null,
  mic: false,
  micMode: null,    /* 'worklet' | 'scriptprocessor' */
  micChunks: 0,
  micBytes: 0,
  micLevel: 0,      /* RMS of the last chunk sent, 0..1 */
  micListen: null,  /* null: lip-synced; 'chat' | 'echo': voice chat (the server listens) */
  transcript: [],   /* {who: 'you'|'avatar'|'note', text, how: 'typed'|'spoken', turn} */
  timeline: null,   /* the last turn's timeline (ms from its start), as the server sent it */
  convEvents: [],   /* every chat/listen/tts event: {name, ...data} */
  lastError: null,
};

let pc = null;          /* the RTCPeerConnection while connecting or connected */
let events = null;      /* EventSource of /sse */
let statsTimer = 0;
let prevStats = null;   /* previous raw figures, for per-second rates */
let mic = null;         /* {stream, ctx, ws, node, src} while the microphone streams */
const activeUtterances = new Set();
const speechWaiters = new Set();

/* ---- messages ------------------------------------------------------------------------------ */

function log(text) {
  const li = document.createElement('li');
  li.textContent = `${new Date().toLocaleTimeString()}  ${text}`;
  ui.log.prepend(li);
  while (ui.log.children.length > 50) ui.log.lastChild.remove();
}

function showError(err) {
  const text = err instanceof Error ? err.message : String(err);
  state.lastError = text;
  ui.errorText.textContent = text;
  ui.error.hidden = false;
  log(`error: ${text}`);
}

function clearError() {
  ui.error.hidden = true;
  ui.errorText.textContent = '';
}

/* Runs a UI action, showing its failure instead of losing it in the console. */
function guarded(fn) {
  return async (ev) => {
    if (ev && ev.preventDefault) ev.preventDefault();
    try { await fn(ev); } catch (e) { showError(e); }
  };
}

/* ---- HTTP API ------------------------------------------------------------------------------ */

/* Calls the API; resolves with the parsed JSON, or throws an Error carrying the server's msg
 * (and .status) for a 4xx/5xx or {"code":-1} answer. */
/* A server started with --api-keys wants "Authorization: Bearer KEY" on its control routes;
 * the key typed into the page is kept in this browser (localStorage) only. */
function authHeaders() {
  const key = (localStorage.getItem('facecast-api-key') || '').trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function api(path, body, method = 'POST') {
  const init = { method, headers: authHeaders() };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new Error(`${method} ${path}: ${e.message}`);
  }
  let json = null;
  try { json = await res.json(); } catch { /* not JSON: reported below */ }
  if (!res.ok || !json || (json.code !== undefined && json.code !== 0)) {
    const msg = json && json.msg ? json.msg : `HTTP ${res.status} ${res.statusText}`;
    const err = new Error(`${path}: ${msg}`);
    err.status = res.status;
    err.serverMsg = msg;
    throw err;
  }
  return json;
}

function needSession() {
  if (!state.sessionid) throw new Error('not connected');
  return state.sessionid;
}

/* ---- connection ---------------------------------------------------------------------------- */

/* The peer connection's configuration: the server's ICE servers (GET /api/ice-servers: its
 * --stun and --turn, TURN with credentials), plus ?stun=stun:host:port; ?relay=1 allows relayed
 * (TURN) candidates only, which shows whether TURN alone gets the media through. */
async function rtcConfig() {
  const q = new URLSearchParams(location.search);
  let servers = [];
  try {
    servers = (await api('/api/ice-servers', undefined, 'GET')).iceServers || [];
  } catch (e) {
    log(`ICE servers: ${e.message}; connecting without`);
  }
  const stun = q.get('stun');
  if (stun) servers.push({ urls: stun });
  const cfg = { iceServers: servers };
  if (q.get('relay') === '1') cfg.iceTransportPolicy = 'relay';
  return cfg;
}

/* Resolves once ICE gathering completes, or after `ms` (the offer then holds what we have). */
function iceGathered(conn, ms) {
  return new Promise((resolve) => {
    if (conn.iceGatheringState === 'complete') return resolve();
    const done = () => {
      clearTimeout(timer);
      conn.removeEventListener('icegatheringstatechange', check);
      conn.removeEventListener('icecandidate', onCandidate);
      resolve();
    };
    const check = () => { if (conn.iceGatheringState === 'complete') done(); };
    const onCandidate = (ev) => { if (!ev.candidate) done(); };
    const timer = setTimeout(done, ms);
    conn.addEventListener('icegatheringstatechange', check);
    conn.addEventListener('icecandidate', onCandidate);
  });
}

function isUp(conn) {
  if (conn.connectionState !== undefined) return conn.connectionState === 'connected';
  return conn.iceConnectionState === 'connected' || conn.iceConnectionState === 'completed';
}

function isDown(conn) {
  const s = conn.connectionState !== undefined ? conn.connectionState : conn.iceConnectionState;
  return s === 'failed' || s === 'closed';
}

function play() {
  ui.video.muted = ui.muted.checked;
  const p = ui.video.play();
  if (p && p.catch) {
    p.catch((e) => {
      if (e.name !== 'NotAllowedError' || ui.video.muted) return;
      /* Autoplay with sound refused (no user gesture): play muted, let the user unmute. */
      ui.muted.checked = true;
      ui.video.muted = true;
      ui.video.play().catch(() => {});
      log('sound is muted: the browser refused autoplay with sound; untick "mute" to hear it');
    });
  }
}

/* Opens a session: resolves with its id once media flows (connectionState "connected"). */
async function connect() {
  if (pc) throw new Error('already connected (or connecting)');
  clearError();
  state.connecting = true;
  setUi();
  const cfg = await rtcConfig(); /* never throws */
  if (pc) throw new Error('already connected (or connecting)');
  const conn = new RTCPeerConnection(cfg);
  pc = conn;
  const stream = new MediaStream();
  conn.addTransceiver('video', { direction: 'recvonly' });
  conn.addTransceiver('audio', { direction: 'recvonly' });
  conn.addEventListener('track', (ev) => {
    stream.addTrack(ev.track);
    if (ui.video.srcObject !== stream) ui.video.srcObject = stream;
    play();
  });
  let up;
  const connected = new Promise((resolve, reject) => {
    up = { resolve, reject };
    const onState = () => {
      if (isUp(conn)) resolve();
      else if (isDown(conn)) reject(new Error(`the connection ${conn.connectionState || conn.iceConnectionState}`));
      if (pc === conn && state.connected && isDown(conn)) lost(conn);
    };
    conn.addEventListener('connectionstatechange', onState);
    conn.addEventListener('iceconnectionstatechange', onState);
  });
  connected.catch(() => {}); /* awaited below; avoid an unhandled rejection meanwhile */
  let timer = 0;
  let sid = null;
  const cancelled = () => {
    const e = new Error('disconnected while connecting');
    e.cancelled = true;
    return e;
  };
  try {
    await conn.setLocalDescription(await conn.createOffer());
    await iceGathered(conn, ICE_GATHER_MS);
    if (pc !== conn) throw cancelled();
    const answer = await api('/offer', { sdp: conn.localDescription.sdp, type: 'offer' });
    sid = String(answer.sessionid);
    if (pc !== conn) throw cancelled();
    state.sessionid = sid;
    await conn.setRemoteDescription({ type: 'answer', sdp: answer.sdp });
    openEvents(sid);
    timer = setTimeout(() => up.reject(new Error(
      `the connection did not come up within ${CONNECT_TIMEOUT_MS / 1000} s`)), CONNECT_TIMEOUT_MS);
    await connected;
    if (pc !== conn) throw cancelled();
  } catch (e) {
    clearTimeout(timer);
    if (pc === conn) {
      closeEvents();
      teardown();
    }
    conn.close();
    /* The server may hold a session for this attempt: free it now rather than in 30 s. */
    if (sid) fetch(`/session/${encodeURIComponent(sid)}`, { method: 'DELETE', headers: authHeaders() }).catch(() => {});
    if (!e.cancelled) showError(e);
    throw e;
  }
  clearTimeout(timer);
  state.connecting = false;
  state.connected = true;
  startStats();
  setUi();
  log(`connected: session ${state.sessionid}`);
  return state.sessionid;
}

/* Closes the session. how: 'delete' (DELETE /session/<id>, then close the peer connection;
 * the default) or 'close' (only pc.close(): the server notices the peer going away). */
async function disconnect(how = 'delete') {
  if (typeof how === 'object' && how) how = how.how;
  const id = state.sessionid;
  let failure = null;
  stopMic();
  closeEvents();
  if (how === 'delete' && id) {
    try {
      await api(`/session/${encodeURIComponent(id)}`, undefined, 'DELETE');
    } catch (e) {
      failure = e;
    }
  }
  teardown();
  log(id ? `disconnected: session ${id}` : 'disconnected');
  if (failure) {
    showError(failure);
    throw failure;
  }
}

/* The peer connection failed, or the server ended the session. */
function lost(conn, why = 'the connection was lost') {
  if (pc !== conn) return;
  const id = state.sessionid;
  stopMic();
  closeEvents();
  teardown();
  showError(`session ${id}: ${why}`);
}

function teardown() {
  stopStats();
  if (pc) pc.close();
  pc = null;
  if (ui.video.srcObject) {
    for (const t of ui.video.srcObject.getTracks()) t.stop();
    ui.video.srcObject = null;
  }
  state.sessionid = null;
  state.connected = false;
  state.connecting = false;
  state.recording = false;
  activeUtterances.clear();
  setSpeaking();
  setUi();
}

/* ---- speech events (SSE) ------------------------------------------------------------------ */

function openEvents(id) {
  closeEvents();
  const es = new EventSource(`/sse?sessionid=${encodeURIComponent(id)}`);
  events = es;
  /* speech start/end: unnamed events in LiveTalking's shape ({status, text, ...}) */
  es.addEventListener('message', (ev) => {
    let d;
    try { d = JSON.parse(ev.data); } catch { return; }
    if (d.event !== 'speech') return;
    const e = { ...d, t: performance.now() };
    state.speechEvents.push(e);
    if (d.type === 'start') activeUtterances.add(d.id);
    else if (d.type === 'end') activeUtterances.delete(d.id);
    setSpeaking();
    for (const w of [...speechWaiters]) w(e);
  });
  for (const name of ['chat', 'listen', 'tts']) {
    es.addEventListener(name, (ev) => {
      let d;
      try { d = JSON.parse(ev.data); } catch { return; }
      state.convEvents.push({ name, ...d });
      conversation(name, d);
    });
  }
  es.addEventListener('error', () => {
    /* CLOSED: reconnecting was refused (the session is gone on the server); otherwise the
     * browser reconnects by itself. */
    if (events === es && es.readyState === EventSource.CLOSED && state.connected) {
      lost(pc, 'the server closed the session');
    }
  });
}

function closeEvents() {
  if (events) events.close();
  events = null;
}

function setSpeaking() {
  state.speaking = activeUtterances.size > 0;
  ui.speaking.dataset.on = String(state.speaking);
  ui.speaking.textContent = state.speaking ? 'speaking' : 'silent';
}

/* Resolves with the first speech event of `type` (and utterance `id`, if given) at index
 * >= since in state.speechEvents — past or future — or rejects after timeoutMs. */
function waitSpeech(type, { since = 0, id, timeoutMs = 15000 } = {}) {
  const match = (e) => e.type === type && (id === undefined || e.id === id);
  const past = state.speechEvents.slice(since).find(match);
  if (past) return Promise.resolve(past);
  return new Promise((resolve, reject) => {
    const w = (e) => {
      if (!match(e)) return;
      speechWaiters.delete(w);
      clearTimeout(timer);
      resolve(e);
    };
    const timer = setTimeout(() => {
      speechWaiters.delete(w);
      reject(new Error(`no speech '${type}' event within ${timeoutMs} ms`));
    }, timeoutMs);
    speechWaiters.add(w);
  });
}

/* ---- conversation ------------------------------------------------------------------------- */

function addLine(who, text, how, turn) {
  const line = { who, text, how, turn };
  state.transcript.push(line);
  const li = document.createElement('li');
  li.className = who;
  li.dataset.how = how || '';
  li.textContent = text;
  line.li = li;
  ui.transcript.append(li);
  while (ui.transcript.children.length > 100) ui.transcript.firstChild.remove();
  li.scrollIntoView({ block: 'nearest' });
  return line;
}

const STAGES = [['asr_ms', 'heard'], ['llm_first_token_ms', 'first token'],
  ['first_sentence_ms', 'first sentence'], ['first_audio_ms', 'first audio'],
  ['first_frame_ms', 'first frame']];

/* What the server says about the conversation, into the transcript and the timeline. */
function conversation(name, d) {
  const last = state.transcript[state.transcript.length - 1];
  if (name === 'listen' && d.status === 'final' && d.text) {
    addLine('you', d.text, 'spoken');
  } else if (name === 'listen' && d.status === 'error') {
    addLine('note', `not understood: ${d.error}`);
  } else if (name === 'listen' && d.status === 'barge-in') {
    addLine('note', 'interrupted by you');
  } else if (name === 'chat' && d.status === 'start') {
    /* a spoken turn's text is already there, as heard */
    if (!(last && last.who === 'you' && last.how === 'spoken' && last.text === d.text)) {
      addLine('you', d.text, 'typed', d.turn);
    }
  } else if (name === 'chat' && d.status === 'sentence') {
    if (last && last.who === 'avatar' && last.turn === d.turn) {
      last.text += ` ${d.text}`;
      last.li.textContent = last.text;
    } else {
      addLine('avatar', d.text, null, d.turn);
    }
  } else if (name === 'chat' && d.status === 'error') {
    addLine('note', `the answer failed: ${d.error}`);
  } else if (name === 'chat' && d.status === 'speaking' && d.timeline) {
    state.timeline = d.timeline;
    const parts = STAGES.filter(([k]) => typeof d.timeline[k] === 'number')
      .map(([k, label]) => `${label} ${Math.round(d.timeline[k])}`);
    ui.timeline.textContent = `turn ${d.turn} (${d.voice ? 'spoken: from the end of your speech' :
      'typed: from the request'}): ${parts.join(' · ')} ms`;
  } else if (name === 'tts' && (d.status === 'fallback' || d.status === 'partial')) {
    addLine('note', `${d.provider} voice failed (${d.status}): ${d.error}`);
  }
}

/* ---- speaking ------------------------------------------------------------------------------ */

/* The voice settings typed into the page: LiveTalking's per-request "tts" object. */
function ttsOptions() {
  const voice = ui.voice.value.trim(), emotion = ui.emotion.value.trim();
  const tts = {};
  if (voice) tts.voice = voice;
  if (emotion) tts.emotion = emotion;
  return Object.keys(tts).length ? { tts } : {};
}

async function say(text, interrupt = false, type = 'echo') {
  return api('/human', { sessionid: needSession(), text, type, interrupt: !!interrupt, ...ttsOptions() });
}

async function interrupt() {
  return api('/interrupt_talk', { sessionid: needSession() });
}

async function isSpeaking() {
  return (await api('/is_speaking', { sessionid: needSession() })).data === true;
}

/* ---- recording ----------------------------------------------------------------------------- */

async function startRecording() {
  await api('/record', { sessionid: needSession(), type: 'start_record' });
  state.recording = true;
  state.recordingUrl = null;
  ui.download.hidden = true;
  setUi();
  log('recording…');
}

/* Resolves with the URL of the finished MP4. */
async function stopRecording() {
  const id = needSession();
  let res;
  try {
    res = await api('/record', { sessionid: id, type: 'end_record' });
  } finally {
    state.recording = false;
    setUi();
  }
  const url = res.data && res.data.url;
  state.recordingUrl = url || null;
  if (url) {
    ui.download.href = url;
    ui.download.download = `facecast-${id}.mp4`;
    ui.download.hidden = false;
    log(`recording ready: ${url}`);
  }
  return url;
}

/* ---- microphone ---------------------------------------------------------------------------- */

/* Box-filter resampler to PCM16: each output sample is the mean of the input over its own
 * 1/outRate span (fractional edges weighted), which also low-passes before decimating. Emits
 * `chunk`-sample ArrayBuffers of little-endian int16. Self-contained: its source text is also
 * loaded into the AudioWorklet. */
class Pcm16Chunker {
  constructor(inRate, outRate, chunk) {
    this.step = inRate / outRate;
    this.acc = 0;
    this.filled = 0;
    this.chunk = chunk;
    this.buf = new ArrayBuffer(chunk * 2);
    this.view = new DataView(this.buf);
    this.n = 0;
  }

  push(input, emit) {
    const step = this.step;
    for (let i = 0; i < input.length; i++) {
      const x = input[i];
      let w = 1;
      while (w > 0) {
        const take = Math.min(w, step - this.filled);
        this.acc += x * take;
        this.filled += take;
        w -= take;
        if (this.filled >= step - 1e-9) {
          let v = this.acc / step;
          v = v < -1 ? -1 : v > 1 ? 1 : v;
          this.view.setInt16(2 * this.n++, Math.round(v < 0 ? v * 32768 : v * 32767), true);
          this.acc = 0;
          this.filled = 0;
          if (this.n === this.chunk) {
            emit(this.buf);
            this.buf = new ArrayBuffer(this.chunk * 2);
            this.view = new DataView(this.buf);
            this.n = 0;
          }
        }
      }
    }
  }
}

function workletSource() {
  return `${Pcm16Chunker.toString()}
class FcPcm16 extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = options.processorOptions;
    this.chunker = new Pcm16Chunker(o.inRate, o.outRate, o.chunk);
    this.emit = (buf) => this.port.postMessage(buf, [buf]);
    this.alive = true;
    this.port.onmessage = (e) => { if (e.data === 'stop') this.alive = false; };
  }
  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (ch) this.chunker.push(ch, this.emit);
    return this.alive;
  }
}
registerProcessor('fc-pcm16', FcPcm16);
`;
}

function wsUrl(path) {
  return `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}${path}`;
}

function openSocket(url) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    const fail = () => reject(new Error('the audio WebSocket did not open'));
    ws.addEventListener('open', () => { ws.removeEventListener('error', fail); resolve(ws); }, { once: true });
    ws.addEventListener('error', fail, { once: true });
  });
}

function sendChunk(buf) {
  const m = mic;
  if (!m || m.ws.readyState !== WebSocket.OPEN) return;
  if (m.ws.bufferedAmount > 64 * 1024) return; /* a stalled socket: drop rather than queue up */
  m.ws.send(buf);
  state.micChunks++;
  state.micBytes += buf.byteLength;
  const v = new DataView(buf);
  let sum = 0;
  for (let i = 0; i < buf.byteLength; i += 2) {
    const s = v.getInt16(i, true) / 32768;
    sum += s * s;
  }
  state.micLevel = Math.sqrt(sum / (buf.byteLength / 2));
  if (state.micChunks % 5 === 0) showLevel();
}

function showLevel() {
  ui.micLevel.firstElementChild.style.width = `${Math.min(100, state.micLevel * 300).toFixed(0)}%`;
}

/* listen: null lip-syncs the microphone; 'chat' or 'echo' streams it for voice chat. */
async function startMic(listen = null) {
  const id = needSession();
  if (mic) return;
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    throw new Error('this browser gives no microphone access here (a secure context is needed)');
  }
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    video: false,
  });
  const m = { stream, ctx: null, ws: null, node: null, src: null };
  mic = m;
  try {
    const q = listen ? `&mode=${encodeURIComponent(listen)}` : '';
    m.ws = await openSocket(wsUrl(`/ws/audio?sessionid=${encodeURIComponent(id)}${q}`));
    m.ws.addEventListener('message', (ev) => {
      if (typeof ev.data === 'string') {
        try { showError(`microphone: ${JSON.parse(ev.data).msg}`); } catch { showError(ev.data); }
      }
    });
    m.ws.addEventListener('close', (ev) => {
      if (mic === m) {
        stopMic();
        if (ev.code !== 1000) showError(`microphone stream closed: ${ev.reason || `code ${ev.code}`}`);
      }
    });
    const Ctx = window.AudioContext || window.webkitAudioContext;
    m.ctx = new Ctx();
    await m.ctx.resume();
    m.src = m.ctx.createMediaStreamSource(stream);
    if (options.micMode !== 'scriptprocessor' && m.ctx.audioWorklet && typeof AudioWorkletNode === 'function') {
      const url = URL.createObjectURL(new Blob([workletSource()], { type: 'text/javascript' }));
      try {
        await m.ctx.audioWorklet.addModule(url);
      } finally {
        URL.revokeObjectURL(url);
      }
      m.node = new AudioWorkletNode(m.ctx, 'fc-pcm16', {
        numberOfInputs: 1, numberOfOutputs: 1, channelCount: 1, channelCountMode: 'explicit',
        channelInterpretation: 'speakers',
        processorOptions: { inRate: m.ctx.sampleRate, outRate: MIC_RATE, chunk: MIC_CHUNK },
      });
      m.node.port.onmessage = (e) => sendChunk(e.data);
      state.micMode = 'worklet';
    } else {
      const chunker = new Pcm16Chunker(m.ctx.sampleRate, MIC_RATE, MIC_CHUNK);
      m.node = m.ctx.createScriptProcessor(2048, 1, 1);
      m.node.onaudioprocess = (e) => chunker.push(e.inputBuffer.getChannelData(0), sendChunk);
      state.micMode = 'scriptprocessor';
    }
    m.src.connect(m.node);
    m.node.connect(m.ctx.destination); /* it outputs silence; connected so it is pulled */
  } catch (e) {
    stopMic();
    throw e;
  }
  state.mic = true;
  state.micListen = listen;
  setUi();
  log(`microphone on (${state.micMode}, ${m.ctx.sampleRate} Hz → 16 kHz${listen ? `, voice ${listen}` : ''})`);
}

function stopMic() {
  const m = mic;
  if (!m) return;
  mic = null;
  if (m.node) {
    if (m.node.port) m.node.port.postMessage('stop');
    m.node.disconnect();
  }
  if (m.src) m.src.disconnect();
  for (const t of m.stream.getTracks()) t.stop();
  if (m.ctx) m.ctx.close().catch(() => {});
  if (m.ws && m.ws.readyState <= WebSocket.OPEN) m.ws.close(1000, 'microphone off');
  state.mic = false;
  state.micListen = null;
  state.micLevel = 0;
  showLevel();
  setUi();
  log('microphone off');
}

/* ---- statistics ---------------------------------------------------------------------------- */

const ms = (s) => (typeof s === 'number' ? s * 1000 : null);

/* Reads getStats: the inbound video and audio RTP entries and the selected candidate pair. */
async function readStats(conn) {
  const report = await conn.getStats();
  const raw = { t: performance.now(), video: null, audio: null, pair: null };
  const pairs = new Map(), candidates = new Map();
  let selectedId = null;
  report.forEach((r) => {
    if (r.type === 'local-candidate' || r.type === 'remote-candidate') candidates.set(r.id, r);
    if (r.type === 'inbound-rtp' && !r.isRemote) {
      raw[(r.kind || r.mediaType) === 'video' ? 'video' : 'audio'] = r;
    } else if (r.type === 'candidate-pair') {
      pairs.set(r.id, r);
      if (r.selected) selectedId = r.id; /* Firefox */
    } else if (r.type === 'transport' && r.selectedCandidatePairId) {
      selectedId = r.selectedCandidatePairId;
    }
  });
  raw.pair = selectedId ? pairs.get(selectedId) || null : null;
  if (!raw.pair) {
    for (const p of pairs.values()) if (p.nominated && p.state === 'succeeded') raw.pair = p;
  }
  const cand = (id) => {
    const c = id && candidates.get(id);
    return c ? { type: c.candidateType, protocol: c.protocol, relayProtocol: c.relayProtocol ?? null } : null;
  };
  raw.route = raw.pair ? { local: cand(raw.pair.localCandidateId), remote: cand(raw.pair.remoteCandidateId) } : null;
  return raw;
}

/* A summary of raw figures; rates (fps, jitter-buffer delay) are over the time since `prev`,
 * or since the start when prev is null (fps then is the browser's framesPerSecond). */
function summarize(raw, prev) {
  const dt = prev ? (raw.t - prev.t) / 1000 : 0;
  const jbufMs = (cur, old) => {
    if (!cur || cur.jitterBufferEmittedCount === undefined) return null;
    const d = cur.jitterBufferDelay - (old ? old.jitterBufferDelay : 0);
    const n = cur.jitterBufferEmittedCount - (old ? old.jitterBufferEmittedCount : 0);
    return n > 0 ? (d / n) * 1000 : null;
  };
  const v = raw.video, a = raw.audio;
  const pv = prev && prev.video, pa = prev && prev.audio;
  return {
    t: raw.t,
    video: v && {
      framesDecoded: v.framesDecoded ?? 0,
      framesReceived: v.framesReceived ?? null,
      framesDropped: v.framesDropped ?? null,
      keyFramesDecoded: v.keyFramesDecoded ?? null,
      framesPerSecond: v.framesPerSecond ?? null,
      fps: pv && dt > 0 ? ((v.framesDecoded ?? 0) - (pv.framesDecoded ?? 0)) / dt : (v.framesPerSecond ?? null),
      width: v.frameWidth ?? null,
      height: v.frameHeight ?? null,
      packetsReceived: v.packetsReceived ?? 0,
      packetsLost: v.packetsLost ?? 0,
      bytesReceived: v.bytesReceived ?? 0,
      jitterMs: ms(v.jitter),
      jitterBufferMs: jbufMs(v, pv),
      freezeCount: v.freezeCount ?? null,
    },
    audio: a && {
      packetsReceived: a.packetsReceived ?? 0,
      packetsLost: a.packetsLost ?? 0,
      bytesReceived: a.bytesReceived ?? 0,
      jitterMs: ms(a.jitter),
      jitterBufferMs: jbufMs(a, pa),
      totalSamplesReceived: a.totalSamplesReceived ?? null,
      concealedSamples: a.concealedSamples ?? null,
      audioLevel: a.audioLevel ?? null,
    },
    rttMs: raw.pair ? ms(raw.pair.currentRoundTripTime) : null,
    /* the selected candidate pair's ends: {type: host|srflx|prflx|relay, protocol: udp|tcp} */
    route: raw.route,
  };
}

/* The once-a-second figures (state.stats): rates over the last second. */
async function tickStats() {
  const conn = pc;
  if (!conn) return null;
  const raw = await readStats(conn);
  if (pc !== conn) return null;
  const s = summarize(raw, prevStats);
  prevStats = raw;
  state.stats = s;
  state.statsCount++;
  return s;
}

/* For callers (tests, the console): cumulative figures now; does not disturb the display. */
async function getStats() {
  return pc ? summarize(await readStats(pc), null) : null;
}

const fmt = (x, digits = 0) => (typeof x === 'number' && Number.isFinite(x) ? x.toFixed(digits) : '–');

function showStats(s) {
  const v = s.video || {}, a = s.audio || {};
  ui.st.fps.textContent = fmt(v.fps, 1);
  ui.st.decoded.textContent = fmt(v.framesDecoded);
  ui.st.res.textContent = v.width ? `${v.width}×${v.height}` : '–';
  ui.st.lost.textContent = `${fmt(v.packetsLost)} / ${fmt(a.packetsLost)}`;
  ui.st.jitter.textContent = `${fmt(v.jitterMs, 1)} / ${fmt(a.jitterMs, 1)}`;
  ui.st.jbuf.textContent = `${fmt(v.jitterBufferMs)} / ${fmt(a.jitterBufferMs)}`;
  ui.st.rtt.textContent = fmt(s.rttMs, 1);
}

function startStats() {
  stopStats();
  prevStats = null;
  const tick = async () => {
    try {
      const s = await tickStats();
      if (s) showStats(s);
    } catch (e) {
      log(`getStats: ${e.message}`);
    }
  };
  tick();
  statsTimer = setInterval(tick, 1000);
}

function stopStats() {
  clearInterval(statsTimer);
  statsTimer = 0;
  prevStats = null;
}

/* ---- page ---------------------------------------------------------------------------------- */

function setUi() {
  const on = state.connected;
  ui.status.dataset.state = on ? 'connected' : state.connecting ? 'connecting' : 'idle';
  ui.status.textContent = on ? 'connected' : state.connecting ? 'connecting…' : 'disconnected';
  ui.session.textContent = state.sessionid ? `session ${state.sessionid}` : '';
  ui.connect.disabled = on || state.connecting;
  ui.disconnect.disabled = !on && !state.connecting;
  for (const el of [ui.text, ui.send, ui.interrupt, ui.mic, ui.record, ui.talk]) el.disabled = !on;
  const lipsync = state.mic && !state.micListen, talking = state.mic && !!state.micListen;
  ui.mic.textContent = lipsync ? 'Stop microphone' : 'Microphone';
  ui.mic.setAttribute('aria-pressed', String(lipsync));
  ui.mic.disabled = !on || talking;
  ui.talk.textContent = talking ? 'Stop talking' : 'Talk';
  ui.talk.setAttribute('aria-pressed', String(talking));
  ui.talk.disabled = !on || lipsync;
  ui.record.textContent = state.recording ? 'Stop recording' : 'Record';
  ui.record.setAttribute('aria-pressed', String(state.recording));
  if (!on) {
    for (const td of Object.values(ui.st)) td.textContent = '–';
  }
}

ui.connect.addEventListener('click', guarded(() => connect()));
ui.disconnect.addEventListener('click', guarded(() => disconnect('delete')));
ui.muted.addEventListener('change', () => { ui.video.muted = ui.muted.checked; });
ui.apiKey.value = localStorage.getItem('facecast-api-key') || '';
ui.apiKey.addEventListener('change', () => localStorage.setItem('facecast-api-key', ui.apiKey.value.trim()));
ui.form.addEventListener('submit', guarded(async () => {
  const text = ui.text.value.trim();
  if (!text) throw new Error('type something to say first');
  clearError();
  const type = ui.sayMode.value;
  await say(text, ui.interruptCheck.checked, type);
  log(`${type === 'chat' ? 'asked' : 'queued'}: ${text.length > 60 ? `${text.slice(0, 57)}…` : text}`);
}));
/* voice chat: the server hears it; in "repeat" mode the avatar says back what it heard */
ui.talk.addEventListener('click', guarded(() => (state.mic ? stopMic() :
  startMic(ui.sayMode.value === 'chat' ? 'chat' : 'echo'))));
ui.interrupt.addEventListener('click', guarded(() => interrupt()));
ui.mic.addEventListener('click', guarded(() => (state.mic ? stopMic() : startMic())));
ui.record.addEventListener('click', guarded(() => (state.recording ? stopRecording() : startRecording())));
ui.errorClose.addEventListener('click', clearError);
ui.text.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey) {
    ev.preventDefault();
    ui.form.requestSubmit();
  }
});
window.addEventListener('pagehide', () => {
  /* Free the server's session at once rather than when it notices the peer is gone. */
  if (state.sessionid) {
    fetch(`/session/${encodeURIComponent(state.sessionid)}`,
          { method: 'DELETE', keepalive: true, headers: authHeaders() }).catch(() => {});
  }
  if (pc) pc.close();
});

setUi();

/* What the server's conversation runs on (GET /healthz): its voice, its ears, whether it has an
 * LLM (without one, chat mode is offered but says so). */
/* Voices to pick from, by the server's TTS (any other name can be typed). */
const VOICES = {
  espeak: ['en', 'en-us', 'en-us+klatt', 'de', 'fr', 'es', 'it', 'pt', 'ru', 'ja', 'zh', 'zh-HK'],
  edge: ['zh-CN-YunxiaNeural', 'zh-CN-XiaoxiaoNeural', 'zh-CN-YunxiNeural', 'zh-HK-HiuGaaiNeural',
    'en-US-AriaNeural', 'en-US-GuyNeural', 'en-GB-SoniaNeural', 'de-DE-KatjaNeural',
    'fr-FR-DeniseNeural', 'es-ES-ElviraNeural', 'ja-JP-NanamiNeural', 'ko-KR-SunHiNeural'],
  openai: ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'nova', 'onyx', 'sage', 'shimmer',
    'verse'],
  cosyvoice: ['中文女', '中文男', '英文女', '英文男', '日语男', '粤语女', '韩语女'],
};

fetch('/healthz').then((r) => r.json()).then((j) => {
  const h = j.data || {};
  const list = $('voices');
  for (const v of VOICES[h.tts] || []) {
    const o = document.createElement('option');
    o.value = v;
    list.append(o);
  }
  ui.engines.textContent = `voice: ${h.tts || '?'} · ears: ${h.asr || '?'} · chat: ${h.chat ? 'LLM' : 'off (no LLM)'}`;
  const chatOption = ui.sayMode.querySelector('option[value="chat"]');
  if (chatOption && h.chat === false) chatOption.textContent = 'answer it (chat: no LLM here)';
}).catch(() => {});

window.fc = {
  state, connect, disconnect, say, interrupt, isSpeaking, startMic, stopMic,
  startRecording, stopRecording, getStats, waitSpeech, api, options, Pcm16Chunker,
  get pc() { return pc; },
  get video() { return ui.video; },
};
