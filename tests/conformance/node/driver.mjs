// Drives @openai/agents-realtime (unmodified, pinned in package-lock.json) in Node for
// tests/conformance: a RealtimeAgent with instructions and a zod-typed tool, a
// RealtimeSession on the 'websocket' transport connected with { url }, then
// sendMessage / sendAudio and the session's events.
//
// The same line protocol and the same five checks as tests/conformance/drivers/common.py
// (keep the two in step): it writes "@@conformance <json>" lines to stdout, reads one JSON
// request a line from stdin, says {"hello"} once and answers each {"id", "check"} with
// {"id", "report"}. Whatever else would print to stdout goes to stderr.

import fs from 'node:fs';
import readline from 'node:readline';
import { createRequire } from 'node:module';
import { RealtimeAgent, RealtimeSession, tool } from '@openai/agents-realtime';
import { z } from 'zod';

const MARK = '@@conformance ';
const RATE = 24000;
const FRAME_MS = 20;

const protocolOut = process.stdout.write.bind(process.stdout);
// Libraries' console output must never be taken for a protocol line.
for (const name of ['log', 'info', 'debug', 'warn']) console[name] = console.error;
process.stdout.write = process.stderr.write.bind(process.stderr);

function write(obj) {
  protocolOut(MARK + JSON.stringify(obj) + '\n');
}

class WaitTimeout extends Error {}

// Wakes whoever waits for a condition on the client's state, at each client event.
class Changes {
  constructor() {
    this.waiters = new Set();
  }
  poke() {
    for (const w of this.waiters) w();
  }
  async until(predicate, timeoutS, what) {
    const deadline = Date.now() + timeoutS * 1000;
    while (!predicate()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new WaitTimeout(what);
      await new Promise((resolve) => {
        // No timer for an unbounded wait (setTimeout caps its delay at 2^31 - 1 ms).
        const timer = Number.isFinite(left) ? setTimeout(done, left) : undefined;
        const waiters = this.waiters;
        function done() {
          clearTimeout(timer);
          waiters.delete(done);
          resolve();
        }
        waiters.add(done);
      });
    }
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A microphone in real time: 20 ms frames of silence or of queued speech, on an
// absolute schedule (late frames go back to back instead of drifting).
class Mic {
  constructor(send, changes) {
    this.send = send;
    this.changes = changes;
    this.queue = Buffer.alloc(0);
    this.sentBytes = 0;
    this.ends = [];
    this.speechDone = 0;
    this.error = null;
    this.running = false;
  }
  get frameBytes() {
    return ((RATE * FRAME_MS) / 1000) * 2;
  }
  say(pcm, leadSilenceMs = 0) {
    const silence = Buffer.alloc(((RATE * leadSilenceMs) / 1000) * 2);
    this.queue = Buffer.concat([this.queue, silence, pcm]);
    this.ends.push(this.sentBytes + this.queue.length);
  }
  start() {
    this.running = true;
    this.done = this.run();
  }
  async stop() {
    this.running = false;
    await this.done;
  }
  async run() {
    const n = this.frameBytes;
    const t0 = Date.now();
    let frames = 0;
    try {
      while (this.running) {
        let frame;
        if (this.queue.length > 0) {
          frame = Buffer.alloc(n);
          this.queue.copy(frame, 0, 0, Math.min(n, this.queue.length));
          this.queue = this.queue.subarray(Math.min(n, this.queue.length));
        } else {
          frame = Buffer.alloc(n);
        }
        await this.send(frame);
        this.sentBytes += n;
        frames += 1;
        const done = this.ends.filter((end) => end <= this.sentBytes).length;
        if (done !== this.speechDone) {
          this.speechDone = done;
          this.changes.poke();
        }
        await sleep(Math.max(0, t0 + frames * FRAME_MS - Date.now()));
      }
    } catch (err) {
      this.error = String(err?.stack ?? err);
      this.changes.poke();
    }
  }
}

class State {
  constructor() {
    this.changes = new Changes();
    this.errors = [];
    this.history = [];
    this.replies = [];
    this.interruptions = [];
    this.toolCalls = [];
    this.softTimeouts = [];
    this.notes = [];
  }
  error(text) {
    this.errors.push(text);
    this.changes.poke();
  }
  audio(key, nbytes) {
    const r = this.replies.find((x) => x.key === key);
    if (r) r.audio_bytes += nbytes;
    else this.replies.push({ key, audio_bytes: nbytes, done: false });
    this.changes.poke();
  }
  replyDone() {
    for (let i = this.replies.length - 1; i >= 0; i--) {
      if (!this.replies[i].done) {
        this.replies[i].done = true;
        break;
      }
    }
    this.changes.poke();
  }
  texts(role) {
    return this.history.filter((i) => i.role === role && i.kind === 'message').map((i) => i.text);
  }
  replyFinished(i) {
    return this.replies.length > i && this.replies[i].done;
  }
  report(mic) {
    return {
      errors: this.errors,
      history: this.history,
      replies: this.replies,
      interruptions: this.interruptions,
      tool_calls: this.toolCalls,
      soft_timeouts: this.softTimeouts,
      notes: this.notes,
      mic_error: mic ? mic.error : null,
    };
  }
}

function contentText(content) {
  return (content ?? [])
    .map((c) => c.text ?? c.transcript ?? '')
    .filter((t) => t)
    .join(' ');
}

function historyItem(item) {
  if (item.type === 'message') {
    return { id: item.itemId, role: item.role, kind: 'message', text: contentText(item.content) };
  }
  if (item.type === 'function_call') {
    return {
      id: item.itemId,
      role: null,
      kind: 'function_call',
      name: item.name,
      arguments: item.arguments,
      output: item.output ?? null,
      text: item.output ?? '',
    };
  }
  return { id: item.itemId ?? null, role: null, kind: item.type, text: '' };
}

class AgentsJsClient {
  constructor() {
    this.state = new State();
    this.session = null;
  }
  async open(request) {
    const st = this.state;
    const getWeather = tool({
      name: 'get_weather',
      description: 'Get the current weather in a city.',
      parameters: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        st.toolCalls.push({ name: 'get_weather', arguments: { city } });
        st.changes.poke();
        return request.tool_result.replace('{city}', city);
      },
    });
    const agent = new RealtimeAgent({ name: 'Assistant', instructions: request.instructions, tools: [getWeather] });
    const s = (this.session = new RealtimeSession(agent, { transport: 'websocket' }));
    s.on('audio', (ev) => st.audio(ev.responseId, ev.data.byteLength));
    s.on('agent_end', () => st.replyDone());
    s.on('audio_interrupted', () => {
      st.interruptions.push('audio_interrupted');
      st.changes.poke();
    });
    s.on('error', (ev) => st.error(`error event: ${describe(ev.error)}`));
    s.on('history_updated', (history) => {
      st.history = history.map(historyItem);
      st.changes.poke();
    });
    await s.connect({ apiKey: 'local', url: request.url });
  }
  async sendText(text) {
    this.session.sendMessage(text);
  }
  async sendAudio(pcm) {
    this.session.sendAudio(pcm.buffer.slice(pcm.byteOffset, pcm.byteOffset + pcm.length));
  }
  async close() {
    this.session?.close();
  }
}

function describe(err) {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  try {
    return JSON.stringify(err);
  } catch {
    return String(err);
  }
}

class Budget {
  constructor(seconds) {
    this.deadline = Date.now() + seconds * 1000;
  }
  left() {
    return Math.max(0.1, (this.deadline - Date.now()) / 1000);
  }
}

async function soft(st, predicate, seconds, what) {
  try {
    await st.changes.until(predicate, seconds, what);
  } catch (err) {
    if (!(err instanceof WaitTimeout)) throw err;
    st.softTimeouts.push(what);
  }
}

async function finish(client, mic, waitingFor) {
  if (mic) await mic.stop();
  try {
    await client.close();
  } catch (err) {
    client.state.notes.push(`close: ${describe(err)}`);
  }
  return { ...client.state.report(mic), waiting_for: waitingFor };
}

async function guarded(fn) {
  try {
    await fn();
    return null;
  } catch (err) {
    if (err instanceof WaitTimeout) return err.message;
    throw err;
  }
}

const checks = {
  async defaults(client, request, control) {
    await client.open(request);
    control.emit({ connected: true });
    const waitingFor = await guarded(() => control.command(request.timeout));
    return finish(client, null, waitingFor);
  },
  async text_audio(client, request) {
    const budget = new Budget(request.timeout);
    const st = client.state;
    await client.open(request);
    await client.sendText(request.text);
    const waitingFor = await guarded(async () => {
      await st.changes.until(() => st.replyFinished(0), budget.left(), "the reply's audio and its end");
      await soft(st, () => st.texts('assistant').some((t) => t), Math.min(5, budget.left()), 'assistant text in history');
    });
    return finish(client, null, waitingFor);
  },
  async spoken_turn(client, request) {
    const budget = new Budget(request.timeout);
    const st = client.state;
    await client.open(request);
    const mic = new Mic((pcm) => client.sendAudio(pcm), st.changes);
    mic.start();
    mic.say(fs.readFileSync(request.speech), 500);
    const waitingFor = await guarded(async () => {
      await st.changes.until(
        () => st.replyFinished(0) || mic.error !== null,
        budget.left(),
        'a reply (audio and its end) to the spoken turn',
      );
      await soft(st, () => st.texts('user').some((t) => t), Math.min(5, budget.left()), "the user's transcript in history");
      await soft(st, () => st.texts('assistant').some((t) => t), Math.min(5, budget.left()), 'assistant text in history');
    });
    return finish(client, mic, waitingFor);
  },
  async interruption(client, request) {
    const budget = new Budget(request.timeout);
    const st = client.state;
    await client.open(request);
    const mic = new Mic((pcm) => client.sendAudio(pcm), st.changes);
    mic.start();
    await client.sendText(request.text);
    const after = (RATE * 2 * request.interrupt_after_ms) / 1000;
    const waitingFor = await guarded(async () => {
      await st.changes.until(
        () => st.replies.length > 0 && st.replies[0].audio_bytes >= after,
        budget.left(),
        `${request.interrupt_after_ms} ms of the long reply's audio`,
      );
      mic.say(fs.readFileSync(request.speech));
      await st.changes.until(
        () => mic.speechDone >= 1 || mic.error !== null,
        budget.left(),
        'the interrupting speech to be sent',
      );
      // A later reply with real audio, ended: the answer to the interrupting turn. (Not
      // simply the second reply: a client may take stray audio for a reply of its own.)
      await st.changes.until(
        () => st.replies.slice(1).some((r) => r.done && r.audio_bytes >= request.min_audio_bytes) || mic.error !== null,
        budget.left(),
        'the reply to the interrupting speech (audio and its end)',
      );
      await soft(st, () => st.interruptions.length > 0, Math.min(5, budget.left()), "the client's interruption event");
      await soft(st, () => st.texts('user').length >= 2, Math.min(5, budget.left()), 'the interrupting turn in history');
    });
    return finish(client, mic, waitingFor);
  },
  async tool(client, request) {
    const budget = new Budget(request.timeout);
    const st = client.state;
    await client.open(request);
    await client.sendText(request.text);
    const waitingFor = await guarded(async () => {
      await st.changes.until(() => st.toolCalls.length > 0, budget.left(), 'the tool handler to run');
      await st.changes.until(
        () => st.replyFinished(0),
        budget.left(),
        "a spoken reply (audio and its end) after the tool's output",
      );
      await soft(st, () => st.texts('assistant').some((t) => t), Math.min(5, budget.left()), 'assistant text in history');
    });
    return finish(client, null, waitingFor);
  },
};

function versions() {
  const require = createRequire(import.meta.url);
  const out = { node: process.versions.node };
  for (const pkg of ['@openai/agents-realtime', '@openai/agents-core', 'openai', 'ws', 'zod']) {
    try {
      const path = require.resolve(`${pkg}/package.json`);
      out[pkg] = JSON.parse(fs.readFileSync(path, 'utf8')).version;
    } catch {
      // Packages whose exports hide package.json: read it from node_modules directly.
      const path = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
      out[pkg] = JSON.parse(fs.readFileSync(path, 'utf8')).version;
    }
  }
  return out;
}

async function main() {
  const requests = [];
  const commands = [];
  const wake = new Changes();
  let closed = false;
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', (line) => {
    if (!line.trim()) return;
    const msg = JSON.parse(line);
    (msg.cmd !== undefined ? commands : requests).push(msg);
    wake.poke();
  });
  rl.on('close', () => {
    closed = true;
    wake.poke();
  });
  write({ hello: { client: 'agents-js', versions: versions() } });
  for (;;) {
    await wake.until(() => requests.length > 0 || closed, Infinity, 'a request');
    if (requests.length === 0) break;
    const request = requests.shift();
    commands.length = 0;
    const control = {
      emit: (event) => write({ id: request.id, event }),
      command: async (timeoutS) => {
        await wake.until(() => commands.length > 0, timeoutS, 'a command from pytest');
        return commands.shift();
      },
    };
    let report;
    const check = checks[request.check];
    try {
      report = check ? await check(new AgentsJsClient(), request, control) : { crash: `no check ${request.check}` };
    } catch (err) {
      report = { crash: String(err?.stack ?? err) };
    }
    write({ id: request.id, report });
  }
  process.exit(0);
}

main();
