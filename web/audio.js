// The audio graph: microphone -> capture worklet (PCM16 at the input rate) and
// playback worklet (jitter buffer, pause/resume/drop) -> speakers.

// Echo cancellation and noise suppression on; automatic gain off: it pumps levels
// between words, which costs recognition more than it helps. The browser's best
// canceller first: "all" (Chrome 141+) takes everything the machine plays as its
// reference, this page's AudioWorklet output included, which "true" does not on
// every platform; where "all" is not known, the plain one. The server cancels what
// is left either way, with the reply as it was played for its reference.
const MIC = { noiseSuppression: true, autoGainControl: false, channelCount: 1 };

export async function microphone() {
  try {
    return await navigator.mediaDevices.getUserMedia({ audio: { ...MIC, echoCancellation: { exact: "all" } } });
  } catch (err) {
    if (err && err.name === "NotAllowedError") throw err;
    return navigator.mediaDevices.getUserMedia({ audio: { ...MIC, echoCancellation: true } });
  }
}

export class AudioEngine extends EventTarget {
  async start({ inputRate, outputRate, jitterMs = 60 }) {
    this.stream = await microphone();
    const track = this.stream.getAudioTracks()[0];
    this.echoCancellation = track && track.getSettings ? track.getSettings().echoCancellation : undefined;
    this.ctx = new AudioContext({ latencyHint: "interactive" });
    await this.ctx.audioWorklet.addModule("capture-worklet.js");
    await this.ctx.audioWorklet.addModule("playback-worklet.js");
    this.source = this.ctx.createMediaStreamSource(this.stream);
    this.capture = new AudioWorkletNode(this.ctx, "capture-processor", {
      numberOfInputs: 1, numberOfOutputs: 0, processorOptions: { outRate: inputRate },
    });
    this.capture.port.onmessage = (e) => this.dispatchEvent(new CustomEvent("capture", { detail: e.data }));
    this.source.connect(this.capture);
    this.playback = new AudioWorkletNode(this.ctx, "playback-processor", {
      numberOfInputs: 0, numberOfOutputs: 1, outputChannelCount: [1],
      processorOptions: { srcRate: outputRate, jitterMs },
    });
    this.playback.port.onmessage = (e) => this.dispatchEvent(new CustomEvent("playback", { detail: e.data }));
    this.playback.connect(this.ctx.destination);
    if (this.ctx.state === "suspended") await this.ctx.resume();
  }

  get now() {
    return this.ctx ? this.ctx.currentTime : 0;
  }

  push(rid, epoch, pcm16) {
    const f = new Float32Array(pcm16.length);
    for (let i = 0; i < pcm16.length; i++) f[i] = pcm16[i] / 32768;
    this.playback.port.postMessage({ type: "audio", rid, epoch, pcm: f.buffer }, [f.buffer]);
  }

  pause(rid) { this.playback.port.postMessage({ type: "pause", rid }); }
  duck(rid, gain) { this.playback.port.postMessage({ type: "duck", rid, gain }); }
  resume() { this.playback.port.postMessage({ type: "resume" }); }
  drop(rid) { this.playback.port.postMessage({ type: "drop", rid }); }
  end(rid) { this.playback.port.postMessage({ type: "end", rid }); }
  mute(muted) { this.capture.port.postMessage({ type: "mute", muted }); }

  async stop() {
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.ctx) await this.ctx.close();
    this.ctx = null;
  }
}
