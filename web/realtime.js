// The wire: a Realtime WebSocket client. Text frames are JSON events; in binary
// audio mode an audio delta's JSON header is followed by one binary frame of PCM16.
// Emits "event" for every server event and "audio" for every audio delta (decoded).

function b64ToInt16(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Int16Array(bytes.buffer, 0, bytes.length >> 1);
}

function int16ToB64(pcm) {
  const bytes = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

const AUDIO_DELTAS = new Set(["response.output_audio.delta", "response.audio.delta"]);

export class RealtimeClient extends EventTarget {
  constructor(url) {
    super();
    this.url = url;
    this.ws = null;
    this.binary = false;
    this.pendingHeader = null;
    this.n = 0;
  }

  connect() {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.url);
      ws.binaryType = "arraybuffer";
      ws.onopen = () => resolve();
      ws.onerror = () => reject(new Error(`cannot connect to ${this.url}`));
      ws.onclose = (e) => this.dispatchEvent(new CustomEvent("close", { detail: { code: e.code, reason: e.reason } }));
      ws.onmessage = (e) => this.onMessage(e.data);
      this.ws = ws;
    });
  }

  onMessage(data) {
    if (typeof data !== "string") {
      const header = this.pendingHeader;
      this.pendingHeader = null;
      if (header) this.emitAudio(header, new Int16Array(data, 0, data.byteLength >> 1));
      return;
    }
    let event;
    try {
      event = JSON.parse(data);
    } catch (err) {
      this.dispatchEvent(new CustomEvent("problem", { detail: `unreadable server message: ${err}` }));
      return;
    }
    if (AUDIO_DELTAS.has(event.type)) {
      if (event.binary) this.pendingHeader = event; // its PCM is the next frame
      else this.emitAudio(event, b64ToInt16(event.delta));
    }
    this.dispatchEvent(new CustomEvent("event", { detail: event }));
  }

  emitAudio(header, pcm) {
    this.dispatchEvent(new CustomEvent("audio", { detail: { event: header, pcm } }));
  }

  get open() {
    return this.ws && this.ws.readyState === WebSocket.OPEN;
  }

  send(type, fields = {}) {
    if (!this.open) return;
    this.n += 1;
    this.ws.send(JSON.stringify({ type, event_id: `web${this.n}`, ...fields }));
  }

  sendAudio(pcm) {
    if (!this.open) return;
    if (this.binary) this.ws.send(pcm.buffer);
    else this.send("input_audio_buffer.append", { audio: int16ToB64(pcm) });
  }

  close() {
    if (this.ws) this.ws.close(1000, "bye");
  }
}
