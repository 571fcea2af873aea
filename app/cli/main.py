"""``duplex``: the command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from duplex.app.cli.backends import BackendChoice, BackendError
from duplex.app.cli.flags import add_flags, from_args
from duplex.app.cli.serving import serve
from duplex.app.core.protocol import DEFAULT_URL
from duplex.app.edge.config import ServerConfig


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="duplex", description="On-device voice-duplex server (OpenAI Realtime protocol)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the server on the built-in offline voice")
    add_flags(serve, ServerConfig)
    add_flags(serve, BackendChoice)
    serve.add_argument("--log-level", default="INFO")
    serve.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="json: one object per line, with session and response ids",
    )
    replay = sub.add_parser("replay", help="run scenario files against a server and judge what it did")
    replay.add_argument("scenarios", nargs="+", help="scenario .toml files (or folders of them)")
    replay.add_argument("--url", default=DEFAULT_URL, help="the server's Realtime WebSocket")
    replay.add_argument(
        "--realtime", action="store_true", help="pace the microphone at real time (default: faster, exact)"
    )
    replay.add_argument("--parallel", action="store_true", help="run the scenarios on concurrent connections")
    replay.add_argument("--report", default="replay-report.json", help="where to write the JSON report")
    replay.add_argument(
        "--wav-dir", default="replays", help="where to write one WAV per scenario (mic left, speaker right)"
    )
    mic = sub.add_parser("mic", help="talk to a server from this machine's microphone and speaker")
    mic.add_argument("--url", default=DEFAULT_URL, help="the server's Realtime WebSocket")
    mic.add_argument("--input", default=None, help="input device (name or index; default: the system's)")
    mic.add_argument("--output", default=None, help="output device (name or index; default: the system's)")
    mic.add_argument("--rate", type=int, default=None, help="device sample rate (default: the input device's)")
    mic.add_argument("--list-devices", action="store_true", help="list audio devices and exit")
    mic.add_argument(
        "--no-echo-cancellation",
        action="store_true",
        help="send the microphone as is, the server cancels the echo instead (or with headphones)",
    )
    mic.add_argument("--jack-name", default=None, help="JACK client name, when PortAudio runs on JACK")
    return parser


def mic(args: argparse.Namespace) -> int:
    """``duplex mic``: a clear message, not a traceback, for every problem a user can fix."""
    from duplex.app.clients.mic import DemoError, MicDemo, list_devices

    try:
        if args.list_devices:
            print(list_devices())
            return 0

        def device(value: str | None) -> str | int | None:
            return int(value) if value is not None and value.isdigit() else value

        # Ctrl-C must stop the demo even when its parent left SIGINT ignored or blocked
        # (both are inherited): a demo that cannot be stopped is worse than none.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        demo = MicDemo(
            args.url,
            input_device=device(args.input),
            output_device=device(args.output),
            rate=args.rate,
            echo_cancellation=not args.no_echo_cancellation,
            client_name=args.jack_name,
        )
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

    from duplex.app.clients.replay import Runner
    from duplex.app.clients.scenario import ScenarioError, load
    from duplex.app.clients.verdicts import table, write_report

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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "replay":
        logging.basicConfig(level=logging.WARNING)
        return replay(args)
    if args.command == "mic":
        return mic(args)
    if args.command == "serve":
        from duplex.app.edge import logs

        logs.setup(args.log_level, args.log_format)
        config = from_args(ServerConfig, args)
        if config.api_key is not None and not config.api_key.strip():
            # An empty key must not quietly turn authentication off.
            print(
                "duplex: --api-key (or $DUPLEX_API_KEY) is empty: set a key, or unset it to run without one",
                file=sys.stderr,
            )
            return 2
        if config.workers < 1:
            print("duplex: --workers must be at least 1", file=sys.stderr)
            return 2
        if config.workers > 1:
            from duplex.app.cli.workers import WorkerArgs, supervise

            worker = WorkerArgs(config, from_args(BackendChoice, args), args.log_level, args.log_format)
            return supervise(worker, config.workers)
        try:
            asyncio.run(serve(config, from_args(BackendChoice, args)))
        except BackendError as exc:
            print(f"duplex: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"duplex: cannot serve on {config.host}:{config.port}: {exc}", file=sys.stderr)
            return 1
    return 0


def entry() -> None:
    """The ``duplex`` command: :func:`main`, then exit without the interpreter's teardown.

    By now every session, backend and log is closed and flushed. What is left is the
    native runtimes' own teardown (onnxruntime's and CTranslate2's thread pools), which
    at interpreter exit can abort a process that had shut down cleanly ("terminate
    called without an active exception", exit -6): skip it.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
