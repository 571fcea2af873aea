// The page: connects the microphone and speaker to a Duplex session and shows the
// conversation, state, levels and latencies. `window.duplex` exposes what the page
// measured, for tests and for the curious.

import { AudioEngine, microphone } from "./audio.js";
import { RealtimeCall } from "./call.js";
import { RealtimeClient } from "./realtime.js";

const $ = (id) => document.getElementById(id);
const INPUT_RATE = 24000;
const OUTPUT_RATE = 24000;
const ACK_MS = 200;

const stats = {
  state: "disconnected", events: [], played: {}, received: {}, firstAudioMs: [], stopMs: [], jitterMs: null,
  pauses: [], truncated: [], transcripts: [], errors: [], inputSamples: 0,
  echoCancellation: null, // what the browser's canceller runs as: "all", true, false
  transport: null, // "webrtc" (a call) or "websocket"
};
window.duplex = stats;

let client = null;
let engine = null; // the WebSocket's audio graph (worklets); a call plays on an <audio> element
let callMic = null; // a call's microphone stream
let muted = false;
let ackTimer = null;
let turnEndedAt = null; // performance.now() when the user's turn ended (or a typed message was sent)
let lastPauseAt = null; // AudioContext time when the last pause event arrived
const bubbles = new Map(); // response id -> {el, text, itemId, status}
const hearing = new Map(); // speech item id -> the user's bubble, filled as words are heard
const itemToResponse = new Map();

function setState(state) {
  stats.state = state;
  const el = $("state");
  el.dataset.state = state;
  el.textContent = state.replace("-", " ");
}

function showError(message) {
  stats.errors.push(message);
  const box = $("errors");
  const p = document.createElement("p");
  p.textContent = message;
  box.append(p);
  box.hidden = false;
  while (box.children.length > 4) box.firstChild.remove();
}

function addMessage(role, text) {
  const el = document.createElement("div");
  el.className = `msg ${role}`;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = role === "user" ? "You" : "Duplex";
  const body = document.createElement("span");
  body.className = "text";
  body.textContent = text;
  el.append(who, body);
  $("conversation").append(el);
  el.scrollIntoView({ block: "end" });
  return el;
}

function showTruncated(rid, keptText, endMs) {
  const b = bubbles.get(rid);
  if (!b) return;
  b.el.classList.add("truncated");
  const body = b.el.querySelector(".text");
  const heard = document.createElement("span");
  heard.className = "heard";
  heard.textContent = keptText;
  const cut = document.createElement("span");
  cut.className = "cut";
  cut.textContent = "✂";
  cut.title = `cut at ${(endMs / 1000).toFixed(2)} s`;
  const unheard = document.createElement("span");
  unheard.className = "unheard";
  unheard.textContent = b.text.slice(keptText.length);
  body.replaceChildren(heard, cut, unheard);
}

function turnDetection() {
  const vad = { threshold: Number($("threshold").value) };
  if ($("turn").value === "semantic_vad") return { type: "semantic_vad", eagerness: $("eagerness").value, ...vad };
  return { type: "server_vad", silence_duration_ms: Number($("silence").value), ...vad };
}

function settingsBody() {
  return {
    audio: { input: { format: { type: "audio/pcm", rate: INPUT_RATE }, turn_detection: turnDetection() },
             output: { format: { type: "audio/pcm", rate: OUTPUT_RATE }, voice: $("voice").value } },
    binary_audio: $("binary").checked,
  };
}

function applySettings() {
  if (!client) return;
  client.binary = false; // until the server confirms
  client.send("session.update", { session: settingsBody() });
}

function onServerEvent(e) {
  stats.events.push(e.type);
  switch (e.type) {
    case "session.updated":
      client.binary = Boolean(e.session.binary_audio);
      stats.binary = client.binary;
      break;
    case "input_audio_buffer.speech_started":
      if (!engine && stats.state === "replying") lastPauseAt = performance.now(); // a call: the track stops server-side
      setState("user-speaking");
      break;
    case "input_audio_buffer.speech_stopped":
      turnEndedAt = performance.now();
      setState("listening");
      break;
    case "conversation.item.input_audio_transcription.delta": {
      // Words heard while the user speaks (the item is the one speech_started named).
      let el = hearing.get(e.item_id);
      if (!el) {
        el = addMessage("user", "");
        el.classList.add("live");
        hearing.set(e.item_id, el);
      }
      el.querySelector(".text").textContent += e.delta;
      stats.partials = (stats.partials || 0) + 1;
      break;
    }
    case "input_audio_buffer.committed": {
      const el = hearing.get(e.item_id);
      for (const [id, other] of hearing) if (id !== e.item_id && other.classList.contains("live")) other.remove();
      hearing.clear();
      if (el) hearing.set(e.item_id, el); // the committed turn takes the bubble its words filled
      break;
    }
    case "conversation.item.input_audio_transcription.completed": {
      stats.transcripts.push(e.transcript);
      const el = hearing.get(e.item_id);
      if (el) {
        el.classList.remove("live");
        el.querySelector(".text").textContent = e.transcript || "(nothing recognised)";
        hearing.delete(e.item_id);
      } else {
        addMessage("user", e.transcript || "(nothing recognised)");
      }
      break;
    }
    case "conversation.item.input_audio_transcription.failed":
      addMessage("user", "(not transcribed)");
      showError(`${e.error.code}: ${e.error.message}`);
      break;
    case "response.created": {
      const rid = e.response.id;
      bubbles.set(rid, { el: addMessage("assistant", ""), text: "", firstAudio: false });
      break;
    }
    case "response.output_item.added":
      itemToResponse.set(e.item.id, e.response_id);
      break;
    case "response.output_audio_transcript.delta": {
      const b = bubbles.get(e.response_id);
      if (b) {
        b.text += e.delta;
        b.el.querySelector(".text").textContent = b.text;
      }
      break;
    }
    case "output_audio_buffer.started": {
      // A call's reply began to play on its track (the WebSocket's first audio delta).
      const b = bubbles.get(e.response_id);
      if (b && !b.firstAudio) {
        b.firstAudio = true;
        firstAudio();
      }
      setState("replying");
      break;
    }
    case "output_audio_buffer.stopped":
      if (stats.state === "replying") setState("listening");
      showJitter();
      break;
    case "output_audio_buffer.cleared":
      if (lastPauseAt !== null) {
        const ms = performance.now() - lastPauseAt;
        stats.stopMs.push(ms);
        $("lat-stop").textContent = `${Math.round(ms)} ms`;
        lastPauseAt = null;
      }
      setState("listening");
      break;
    case "response.output_audio.paused":
      lastPauseAt = engine.now;
      engine.pause(e.response_id);
      setState("interrupted");
      break;
    case "response.output_audio.ducked":
      lastPauseAt = engine.now;
      engine.duck(e.response_id, Math.pow(10, e.gain_db / 20));
      setState("interrupted");
      break;
    case "response.output_audio.resumed":
      engine.resume();
      setState("replying");
      break;
    case "response.done": {
      const r = e.response;
      if (engine) engine.end(r.id);
      if (r.status !== "completed") {
        if (engine) engine.drop(r.id);
        const b = bubbles.get(r.id);
        if (b) b.el.classList.add("cancelled");
      }
      if (r.status === "cancelled" || stats.state === "interrupted") setState("listening");
      break;
    }
    case "conversation.item.truncated": {
      const rid = itemToResponse.get(e.item_id);
      if (rid && engine) engine.drop(rid);
      stats.truncated.push({ response_id: rid, item_id: e.item_id, audio_end_ms: e.audio_end_ms });
      client.send("conversation.item.retrieve", { item_id: e.item_id });
      setState("listening");
      break;
    }
    case "conversation.item.retrieved": {
      const rid = itemToResponse.get(e.item.id);
      const t = stats.truncated.find((x) => x.item_id === e.item.id);
      const part = e.item.content && e.item.content[0];
      if (rid && t && part) showTruncated(rid, part.transcript || "", t.audio_end_ms);
      break;
    }
    case "error":
      showError(`${e.error.code}: ${e.error.message}`);
      break;
    default:
  }
}

function onAudio({ event, pcm }) {
  const rid = event.response_id;
  stats.received[rid] = (stats.received[rid] || 0) + pcm.length;
  const b = bubbles.get(rid);
  if (b && !b.firstAudio) {
    b.firstAudio = true;
    firstAudio();
  }
  engine.push(rid, event.epoch, pcm);
}

function firstAudio() {
  if (turnEndedAt !== null) {
    const ms = performance.now() - turnEndedAt;
    stats.firstAudioMs.push(ms);
    $("lat-first").textContent = `${Math.round(ms)} ms`;
    turnEndedAt = null;
  }
}

// A call: what the browser's jitter buffer holds, once a reply has played (a WebSocket has none).
async function showJitter() {
  if (!(client instanceof RealtimeCall)) return;
  const ms = await client.jitterMs().catch(() => null); // (the call may have ended meanwhile)
  if (ms === null) return;
  stats.jitterMs = ms;
  $("lat-jitter").textContent = `${Math.round(ms)} ms`;
}

function onPlayback(m) {
  if (m.type === "stats") {
    stats.played = m.played;
    stats.current = m.current;
    stats.buffered = m.buffered;
    $("out-level").value = Math.min(1, m.level * 4);
    if (m.current && !m.paused && m.buffered > 0 && stats.state !== "user-speaking") setState("replying");
    else if (stats.state === "replying" && m.buffered === 0 && !m.paused) setState("listening");
  } else if (m.type === "paused" && lastPauseAt !== null) {
    // How long after the server's pause event the speaker actually went quiet.
    const ms = Math.max(0, (m.at - lastPauseAt) * 1000);
    stats.pauses.push({ eventAt: lastPauseAt, stoppedAt: m.at, wasLive: m.wasLive });
    stats.stopMs.push(ms);
    $("lat-stop").textContent = `${Math.round(ms)} ms`;
  }
}

function sendAck() {
  const rid = stats.current;
  if (!client || !rid || stats.played[rid] === undefined) return;
  client.send("playback.ack", { response_id: rid, played_samples: stats.played[rid],
                                input_samples: stats.inputSamples });
}

function listen(c) {
  c.addEventListener("event", (e) => onServerEvent(e.detail));
  c.addEventListener("audio", (e) => onAudio(e.detail));
  c.addEventListener("problem", (e) => showError(e.detail));
  c.addEventListener("close", (e) => {
    if (client === c && stats.state !== "disconnected") showError(`connection closed (${e.detail.code}) ${e.detail.reason}`);
    if (client === c) hangUp();
  });
}

function chosenTransport() {
  const asked = new URLSearchParams(location.search).get("transport");
  return asked || $("transport").value;
}

async function call() {
  // WebRTC: the microphone as a track, the reply on an <audio> element, events on a channel.
  callMic = await microphone();
  const track = callMic.getAudioTracks()[0];
  stats.echoCancellation = track && track.getSettings ? (track.getSettings().echoCancellation ?? null) : null;
  const c = new RealtimeCall(`${location.origin}/v1/realtime/calls`);
  listen(c);
  client = c;
  await c.connect(callMic);
  stats.transport = "webrtc";
}

async function socket() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const c = new RealtimeClient(`${scheme}://${location.host}/v1/realtime?duplex=1`); // with Duplex's own events
  listen(c);
  client = c;
  await c.connect();
  engine = new AudioEngine();
  await engine.start({ inputRate: INPUT_RATE, outputRate: OUTPUT_RATE });
  stats.echoCancellation = engine.echoCancellation ?? null;
  engine.addEventListener("capture", (e) => {
    const m = e.detail;
    stats.inputSamples = m.samples;
    $("in-level").value = Math.min(1, m.level * 4);
    client.sendAudio(new Int16Array(m.pcm));
  });
  engine.addEventListener("playback", (e) => onPlayback(e.detail));
  ackTimer = setInterval(sendAck, ACK_MS);
  stats.transport = "websocket";
}

async function connect() {
  $("connect").disabled = true;
  try {
    if (chosenTransport() === "webrtc" && window.RTCPeerConnection) {
      try {
        await call();
      } catch (err) {
        if (err && err.name === "NotAllowedError") throw err; // no microphone: no transport helps
        showError(`WebRTC call failed (${err.message || err}); using the WebSocket`);
        await dropTransport();
        await socket();
      }
    } else {
      await socket();
    }
    applySettings();
    setState("listening");
    for (const id of ["mute", "end", "text", "send"]) $(id).disabled = false;
  } catch (err) {
    showError(String(err.message || err));
    hangUp();
  }
}

async function dropTransport() {
  clearInterval(ackTimer);
  const c = client;
  client = null;
  if (c) c.close();
  if (engine) await engine.stop();
  engine = null;
  if (callMic) callMic.getTracks().forEach((t) => t.stop());
  callMic = null;
}

async function hangUp() {
  await dropTransport();
  setState("disconnected");
  $("connect").disabled = false;
  for (const id of ["mute", "end", "text", "send"]) $(id).disabled = true;
}

$("connect").addEventListener("click", connect);
$("end").addEventListener("click", hangUp);
$("mute").addEventListener("click", () => {
  muted = !muted;
  $("mute").setAttribute("aria-pressed", String(muted));
  $("mute").textContent = muted ? "Unmute" : "Mute";
  if (engine) engine.mute(muted);
  if (callMic) callMic.getAudioTracks().forEach((t) => { t.enabled = !muted; });
});
$("typed").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("text").value.trim();
  if (!text || !client) return;
  addMessage("user", text);
  client.send("conversation.item.create", { item: { type: "message", role: "user",
                                                    content: [{ type: "input_text", text }] } });
  client.send("response.create");
  turnEndedAt = performance.now();
  $("text").value = "";
});
$("threshold").addEventListener("input", () => { $("threshold-value").textContent = $("threshold").value; });
$("settings-form").addEventListener("submit", (ev) => { ev.preventDefault(); applySettings(); });
