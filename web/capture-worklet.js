// Microphone capture: the context's rate in, PCM16 at the session's input rate out.
// A small windowed-sinc resampler keeps its state across render quanta, so the
// stream is continuous; 20 ms frames go to the main thread with the running
// sample count (the client's input clock) and an input level.

const TAPS = 16;

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.outRate = options.processorOptions.outRate;
    this.ratio = sampleRate / this.outRate; // input samples per output sample
    this.cutoff = Math.min(1, 1 / this.ratio);
    this.history = new Float32Array(0); // input samples not yet fully used
    this.pos = 0; // position of the next output sample, in history's samples
    this.frameSize = Math.round(this.outRate / 50); // 20 ms
    this.frame = new Int16Array(this.frameSize);
    this.filled = 0;
    this.sent = 0;
    this.muted = false;
    this.sumSq = 0;
    this.port.onmessage = (e) => {
      if (e.data.type === "mute") this.muted = e.data.muted;
    };
  }

  kernel(x) {
    if (x === 0) return this.cutoff;
    const w = 0.5 + 0.5 * Math.cos((Math.PI * x) / (TAPS / 2)); // Hann window
    return (Math.sin(Math.PI * this.cutoff * x) / (Math.PI * x)) * w;
  }

  process(inputs) {
    const input = inputs[0] && inputs[0][0];
    if (!input) return true;
    const merged = new Float32Array(this.history.length + input.length);
    merged.set(this.history);
    merged.set(input, this.history.length);
    const half = TAPS / 2;
    while (this.pos + half < merged.length) {
      const centre = Math.floor(this.pos);
      let acc = 0;
      for (let k = centre - half + 1; k <= centre + half; k++) {
        if (k >= 0) acc += merged[k] * this.kernel(this.pos - k);
      }
      const s = this.muted ? 0 : Math.max(-1, Math.min(1, acc));
      this.sumSq += s * s;
      this.frame[this.filled++] = s < 0 ? s * 32768 : s * 32767;
      if (this.filled === this.frameSize) {
        this.sent += this.filled;
        const level = Math.sqrt(this.sumSq / this.filled);
        // The buffer is transferred (it detaches here), so each frame gets a new one.
        this.port.postMessage({ type: "frame", pcm: this.frame.buffer, samples: this.sent, level }, [this.frame.buffer]);
        this.frame = new Int16Array(this.frameSize);
        this.filled = 0;
        this.sumSq = 0;
      }
      this.pos += this.ratio;
    }
    // Keep what the next output samples still need.
    const keepFrom = Math.max(0, Math.floor(this.pos) - half);
    this.history = merged.slice(keepFrom);
    this.pos -= keepFrom;
    return true;
  }
}

registerProcessor("capture-processor", CaptureProcessor);
