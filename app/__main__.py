"""``duplex``: the command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from app.backends import BackendChoice, BackendError, build
from app.config import DEFAULT_HOST, DEFAULT_PORT, ServerConfig


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="duplex", description="On-device voice-duplex server (OpenAI Realtime protocol).")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the server on the built-in offline voice")
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    serve.add_argument("--voice", default="alloy", help="default voice (an OpenAI voice name or an eSpeak NG voice)")
    serve.add_argument("--talker", choices=["espeak", "vllm"], default="espeak",
                       help="espeak: the built-in offline voice; vllm: a codec-token model served by vLLM")
    serve.add_argument("--model", help="--talker vllm: a local checkpoint directory (run in this process)")
    serve.add_argument("--remote-url", help="--talker vllm: a vLLM OpenAI-compatible server instead of --model")
    serve.add_argument("--remote-model", help="the model name that server serves")
    serve.add_argument("--codec-layout", default="orpheus", help="prompt and token layout: 'orpheus' or a JSON file")
    serve.add_argument("--vocoder", choices=["pcm", "snac"], help="default: pcm for espeak, snac for vllm")
    serve.add_argument("--vocoder-weights", help="--vocoder snac: a local SNAC checkpoint directory")
    serve.add_argument("--dtype", default="float32", help="vLLM weights dtype (float32 is safe on any CPU)")
    serve.add_argument("--thinker", choices=["echo", "openai", "vllm"], default="echo",
                       help="what to say: echo what was heard (default), an OpenAI-compatible chat endpoint, "
                            "or a vLLM chat model in process")
    serve.add_argument("--thinker-url", help="--thinker openai: the endpoint's base URL (e.g. http://host:8000)")
    serve.add_argument("--thinker-model", help="--thinker openai: the model name; --thinker vllm: a local path")
    serve.add_argument("--system-prompt", default="", help="the thinker's system prompt (session instructions win)")
    serve.add_argument("--temperature", type=float, default=0.7)
    serve.add_argument("--max-tokens", type=int, default=256, help="the thinker's reply length limit")
    serve.add_argument("--thinker-sampling", default="", help="more sampling parameters for the thinker, as JSON")
    serve.add_argument("--max-sessions", type=int, default=200)
    serve.add_argument("--max-message-bytes", type=int, default=2 * 1024 * 1024)
    serve.add_argument("--asr-workers", type=int, default=2,
                       help="speech recognition worker processes (~100 MB each)")
    serve.add_argument("--log-level", default="INFO")
    serve.add_argument("--log-format", choices=["text", "json"], default="text",
                       help="json: one object per line, with session and response ids")
    serve.add_argument("--api-key", default=os.environ.get("DUPLEX_API_KEY"),
                       help="require this key (Bearer header, api_key query, or key subprotocol); "
                            "default: $DUPLEX_API_KEY, else none")
    serve.add_argument("--allow-origin", action="append", default=[],
                       help="a browser origin allowed to open sessions (repeatable; '*' for any); "
                            "default: the server's own page")
    serve.add_argument("--max-input-speed", type=float, default=64.0,
                       help="input audio may arrive at most this many times faster than real time")
    serve.add_argument("--max-reply-s", type=float, default=300.0, help="longest reply, in seconds of audio")
    serve.add_argument("--idle-timeout", type=float, default=600.0, help="close a session silent this long (s)")
    serve.add_argument("--stall-timeout", type=float, default=30.0,
                       help="close a client that has not read for this long (s)")
    replay = sub.add_parser("replay", help="run scenario files against a server and judge what it did")
    replay.add_argument("scenarios", nargs="+", help="scenario .toml files (or folders of them)")
    replay.add_argument("--url", default="ws://127.0.0.1:8765/v1/realtime", help="the server's Realtime WebSocket")
    replay.add_argument("--realtime", action="store_true", help="pace the microphone at real time (default: faster, exact)")
    replay.add_argument("--parallel", action="store_true", help="run the scenarios on concurrent connections")
    replay.add_argument("--report", default="replay-report.json", help="where to write the JSON report")
    replay.add_argument("--wav-dir", default="replays", help="where to write one WAV per scenario (mic left, speaker right)")
    mic = sub.add_parser("mic", help="talk to a server from this machine's microphone and speaker")
    mic.add_argument("--url", default="ws://127.0.0.1:8765/v1/realtime", help="the server's Realtime WebSocket")
    mic.add_argument("--input", default=None, help="input device (name or index; default: the system's)")
    mic.add_argument("--output", default=None, help="output device (name or index; default: the system's)")
    mic.add_argument("--rate", type=int, default=None, help="device sample rate (default: the input device's)")
    mic.add_argument("--list-devices", action="store_true", help="list audio devices and exit")
    mic.add_argument("--no-echo-gate", action="store_true", help="send the microphone as is (use with headphones)")
    mic.add_argument("--jack-name", default=None, help="JACK client name, when PortAudio runs on JACK")
    return parser


def mic(args: argparse.Namespace) -> int:
    """``duplex mic``: a clear message, not a traceback, for every problem a user can fix."""
    from app.mic import DemoError, MicDemo, list_devices

    try:
        if args.list_devices:
            print(list_devices())
            return 0

        def device(value: str | None):
            return int(value) if value is not None and value.isdigit() else value

        demo = MicDemo(args.url, input_device=device(args.input), output_device=device(args.output),
                       rate=args.rate, echo_gate=not args.no_echo_gate, client_name=args.jack_name)
        asyncio.run(demo.run())
    except DemoError as exc:
        print(f"duplex mic: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # no PortAudio library at all
        print(f"duplex mic: audio is not available: {exc} (install libportaudio2)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
    return 0


def replay(args: argparse.Namespace) -> int:
    """``duplex replay``: non-zero exit when a scenario fails."""
    from pathlib import Path

    from app.replay import Runner, table, write_report
    from app.scenario import ScenarioError, load

    files: list[Path] = []
    for name in args.scenarios:
        p = Path(name)
        files += sorted(p.glob("*.toml")) if p.is_dir() else [p]
    try:
        scenarios = [load(f) for f in files]
    except ScenarioError as exc:
        print(f"duplex replay: {exc}", file=sys.stderr)
        return 2
    runner = Runner(args.url, realtime=args.realtime, wav_dir=args.wav_dir)
    results = asyncio.run(runner.run_many(scenarios, parallel=args.parallel))
    print(table(results))
    write_report(results, args.report)
    failed = [r.name for r in results if not r.passed]
    print(f"\n{len(results) - len(failed)}/{len(results)} passed; report: {args.report}; audio: {args.wav_dir}/")
    return 1 if failed else 0


async def serve(config: ServerConfig, backends: BackendChoice) -> None:
    """Run until SIGINT/SIGTERM, then close every session with a close frame."""
    from app.server import DuplexServer
    from pipeline.asr import PocketsphinxRecognizer
    from pipeline.vad import SileroModel

    talker, vocoder, thinker = await build(backends)
    recognizer = PocketsphinxRecognizer(workers=config.asr_workers)
    try:
        try:
            talker.check_voice(config.voice)
        except ValueError as exc:
            raise BackendError(f"--voice: {exc}") from None
        # Every decoder up front: the server's memory is what it will be under load.
        await asyncio.to_thread(recognizer.prewarm)
        server = DuplexServer(talker, vocoder, config, vad_model=SileroModel(), recognizer=recognizer,
                              thinker=thinker)
        await server.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        server.close()
        await server.wait_closed()
    finally:
        recognizer.close()
        await thinker.aclose()
        await talker.aclose()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "replay":
        logging.basicConfig(level=logging.WARNING)
        return replay(args)
    if args.command == "mic":
        return mic(args)
    if args.command == "serve":
        from app import logs

        logs.setup(args.log_level, args.log_format)
        if args.asr_workers < 1:
            print("duplex: --asr-workers must be at least 1", file=sys.stderr)
            return 2
        config = ServerConfig(host=args.host, port=args.port, voice=args.voice,
                              max_sessions=args.max_sessions, max_message_bytes=args.max_message_bytes,
                              api_key=args.api_key or None, allowed_origins=tuple(args.allow_origin),
                              max_input_speed=args.max_input_speed, max_reply_s=args.max_reply_s,
                              idle_timeout_s=args.idle_timeout, stall_timeout_s=args.stall_timeout,
                              asr_workers=args.asr_workers)
        backends = BackendChoice(talker=args.talker, model=args.model, remote_url=args.remote_url,
                                 remote_model=args.remote_model, codec_layout=args.codec_layout,
                                 vocoder=args.vocoder, vocoder_weights=args.vocoder_weights, dtype=args.dtype,
                                 thinker=args.thinker, thinker_url=args.thinker_url,
                                 thinker_model=args.thinker_model, system_prompt=args.system_prompt,
                                 temperature=args.temperature, max_tokens=args.max_tokens,
                                 thinker_sampling=args.thinker_sampling)
        try:
            asyncio.run(serve(config, backends))
        except BackendError as exc:
            print(f"duplex: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"duplex: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
