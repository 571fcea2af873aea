#!/usr/bin/env bash
# Installs the third-party Realtime clients the conformance suite (tests/conformance)
# drives, at pinned versions. Idempotent; needs the project's .venv (made first) and
# Node 20+ with npm. Run from anywhere: bash tests/conformance/install.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

# Pipecat's realtime service and LiveKit's OpenAI plugin share the project's venv.
# Pipecat is only a client here (Duplex ships Smart Turn's weights itself): pipecat-ai
# is a --no-deps install, as its full dependency set pins protobuf<7 and soxr~=1.0
# against ours; the `conformance` extra adds only what its realtime service imports.
.venv/bin/pip install -q --no-deps pipecat-ai==1.14.0
.venv/bin/pip install -q -e '.[conformance]'

# openai-agents pins websockets<17, the server needs 17: it gets its own venv, on the
# same Python as the project's.
agents=tests/conformance/.venv-agents
if [ ! -x "$agents/bin/python" ]; then
  "$(.venv/bin/python -c 'import sys; print(sys._base_executable)')" -m venv "$agents"
fi
"$agents/bin/pip" install -q --upgrade pip
"$agents/bin/pip" install -q -r tests/conformance/requirements-agents.txt

# @openai/agents-realtime in Node, exactly as package-lock.json pins it. Without npm the
# Node client's tests skip and say so (and fail where DUPLEX_REQUIRE_ALL=1).
if command -v npm >/dev/null; then
  (cd tests/conformance/node && npm ci --no-audit --no-fund --loglevel=error)
else
  echo "install.sh: npm not found: the @openai/agents-realtime conformance tests will be skipped" >&2
fi
