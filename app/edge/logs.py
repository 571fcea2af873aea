"""Log lines that carry their session and response ids, as text or JSON."""

from __future__ import annotations

import json
import logging
import time

FIELDS = ("session", "response", "refusal")


class ContextFormatter(logging.Formatter):
    """``time level logger: message [session=... response=...]``."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ctx = " ".join(f"{f}={getattr(record, f)}" for f in FIELDS if getattr(record, f, None))
        return f"{line} [{ctx}]" if ctx else line


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update({f: getattr(record, f) for f in FIELDS if getattr(record, f, None)})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else ContextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("websockets", "httpx"):  # one line per HTTP request (a remote voice's: per sentence) is noise
        logging.getLogger(noisy).setLevel(logging.WARNING)
