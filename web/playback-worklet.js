// Reply playback with a small jitter buffer. Audio arrives as PCM (float) at the
// session's output rate, tagged with its response id and epoch; it is resampled to
// the context's rate as it plays. On "pause" output stops at the next render
// quantum (the buffer is kept); on "duck" that reply plays on at a lower gain;
// "resume" carries on; "drop" discards a reply's
// audio. It counts the samples of each reply it has actually played (in
// output-rate samples) and reports them, with when it stopped, to the main thread.

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.srcRate = options.processorOptions.srcRate;
    this.jitter = Math.round((options.processorOptions.jitterMs / 1000) * this.srcRate);
    this.step = this.srcRate / sampleRate; // source samples per output sample
    this.queue = []; // {rid, epoch, pcm: Float32Array, offset}
    this.frac = 0; // fractional source position within the head chunk
    this.prev = 0; // last source sample played, for interpolation
    this.paused = false;
    this.pausedRid = null; // the reply that is paused; others may play
    this.duckRid = null; // the reply that plays on quieter while speech over it is judged
    this.duckGain = 1;
    this.started = false; // jitter buffer filled once for the current reply
    this.ended = new Set(); // replies whose last audio has arrived
    this.played = {}; // rid -> source samples played
    this.current = null;
    this.live = false; // produced sound in the last quantum
    this.sumSq = 0;
    this.n = 0;
    this.lastReport = 0;
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  onMessage(m) {
    if (m.type === "audio") {
      this.queue.push({ rid: m.rid, epoch: m.epoch, pcm: new Float32Array(m.pcm), offset: 0 });
    } else if (m.type === "end") {
      this.ended.add(m.rid);
    } else if (m.type === "pause") {
      this.paused = true;
      this.pausedRid = m.rid;
      this.port.postMessage({ type: "paused", at: currentTime, wasLive: this.live });
    } else if (m.type === "duck") {
      this.duckRid = m.rid;
      this.duckGain = m.gain;
      this.port.postMessage({ type: "paused", at: currentTime, wasLive: this.live, ducked: true });
    } else if (m.type === "resume") {
      this.paused = false;
      this.duckRid = null;
    } else if (m.type === "drop") {
      const before = this.buffered();
      this.queue = this.queue.filter((c) => c.rid !== m.rid);
      if (this.current === m.rid) this.started = false;
      if (this.pausedRid === m.rid) this.paused = false; // nothing of it is left to resume
      if (this.duckRid === m.rid) this.duckRid = null;
      this.port.postMessage({ type: "dropped", rid: m.rid, samples: before - this.buffered(), at: currentTime });
    }
  }

  buffered() {
    let n = 0;
    for (const c of this.queue) n += c.pcm.length - c.offset;
    return n;
  }

  nextSample() {
    while (this.queue.length && this.queue[0].offset >= this.queue[0].pcm.length) this.queue.shift();
    if (!this.queue.length) return null;
    const head = this.queue[0];
    if (head.rid !== this.current) {
      this.current = head.rid;
      this.started = false;
    }
    return head;
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    let live = false;
    for (let i = 0; i < out.length; i++) {
      let s = 0;
      let head = this.nextSample();
      if (head && this.paused && head.rid === this.pausedRid) head = null;
      if (head) {
        if (!this.started) {
          // Wait for a little audio before starting a reply, unless it is all here.
          this.started = this.buffered() >= this.jitter || this.ended.has(head.rid);
        }
        if (this.started) {
          const cur = head.pcm[head.offset];
          s = this.prev + (cur - this.prev) * this.frac; // linear interpolation
          if (head.rid === this.duckRid) s *= this.duckGain;
          this.frac += this.step;
          while (this.frac >= 1) { // consume the source samples this output sample passed
            const h = this.nextSample();
            if (!h) { this.frac = 0; break; }
            this.frac -= 1;
            this.prev = h.pcm[h.offset];
            h.offset += 1;
            this.played[h.rid] = (this.played[h.rid] || 0) + 1;
          }
          live = true;
        }
      }
      out[i] = s;
      this.sumSq += s * s;
      this.n += 1;
    }
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    if (this.live && !live) this.port.postMessage({ type: "silent", at: currentTime });
    this.live = live;
    if (currentTime - this.lastReport >= 0.05) {
      this.lastReport = currentTime;
      this.port.postMessage({
        type: "stats", at: currentTime, played: { ...this.played }, current: this.current,
        level: Math.sqrt(this.sumSq / Math.max(1, this.n)), buffered: this.buffered(), paused: this.paused,
      });
      this.sumSq = 0;
      this.n = 0;
    }
    return true;
  }
}

registerProcessor("playback-processor", PlaybackProcessor);
