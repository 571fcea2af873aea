// The page's default transport: a WebRTC call (POST /v1/realtime/calls). The
// microphone goes out as a track, the reply comes back as one, played by an <audio>
// element (a remote track: the one output every browser's echo canceller takes as its
// reference), and events travel on the "oai-events" data channel. The same events as
// the WebSocket's, less the audio deltas, plus output_audio_buffer.started|stopped|cleared;
// the server holds the speaker's clock (it knows what the track has played).

const OPEN_TIMEOUT_MS = 15000;

export class RealtimeCall extends EventTarget {
  constructor(url) {
    super();
    this.url = url;
    this.pc = null;
    this.dc = null;
    this.audio = null;
    this.location = null;
    this.n = 0;
    this.binary = false; // the WebSocket's notion; a call carries audio on its tracks
  }

  async connect(stream) {
    const pc = new RTCPeerConnection();
    this.pc = pc;
    for (const track of stream.getAudioTracks()) pc.addTrack(track, stream);
    const audio = document.createElement("audio");
    audio.autoplay = true;
    audio.hidden = true;
    document.body.append(audio);
    this.audio = audio;
    pc.ontrack = (e) => {
      audio.srcObject = e.streams[0] || new MediaStream([e.track]);
    };
    const dc = pc.createDataChannel("oai-events");
    this.dc = dc;
    const opened = new Promise((resolve, reject) => {
      dc.onopen = resolve;
      setTimeout(() => reject(new Error("the call's events channel did not open")), OPEN_TIMEOUT_MS);
    });
    dc.onmessage = (e) => this.onMessage(e.data);
    dc.onclose = () => this.dispatchEvent(new CustomEvent("close", { detail: { code: 1000, reason: "call ended" } }));
    await pc.setLocalDescription(await pc.createOffer());
    const r = await fetch(this.url, { method: "POST", body: pc.localDescription.sdp,
                                      headers: { "Content-Type": "application/sdp" } });
    const body = await r.text();
    if (r.status !== 201) throw new Error(`the call was refused (${r.status}): ${body.trim()}`);
    this.location = r.headers.get("Location");
    await pc.setRemoteDescription({ type: "answer", sdp: body });
    await opened;
  }

  onMessage(data) {
    let event;
    try {
      event = JSON.parse(data);
    } catch (err) {
      this.dispatchEvent(new CustomEvent("problem", { detail: `unreadable server message: ${err}` }));
      return;
    }
    this.dispatchEvent(new CustomEvent("event", { detail: event }));
  }

  // What the browser's jitter buffer held each sample of the reply, on average (ms): a
  // barge-in's stop reaches the speaker this much after the track goes quiet.
  async jitterMs() {
    if (!this.pc) return null;
    for (const s of (await this.pc.getStats()).values()) {
      if (s.type === "inbound-rtp" && s.kind === "audio" && s.jitterBufferEmittedCount > 0) {
        return (1000 * s.jitterBufferDelay) / s.jitterBufferEmittedCount;
      }
    }
    return null;
  }

  get open() {
    return this.dc && this.dc.readyState === "open";
  }

  send(type, fields = {}) {
    if (!this.open) return;
    this.n += 1;
    this.dc.send(JSON.stringify({ type, event_id: `web${this.n}`, ...fields }));
  }

  sendAudio() {} // the microphone is a track

  close() {
    if (this.location) fetch(`${this.location}/hangup`, { method: "POST" }).catch(() => {});
    if (this.pc) this.pc.close();
    if (this.audio) this.audio.remove();
    this.pc = null;
  }
}
