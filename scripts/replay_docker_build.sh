#!/usr/bin/env bash
# Replay deploy/Dockerfile's build stage without a Docker engine, then run the three services
# from that install with a READ-ONLY install tree (mount namespace, needs root/unshare), writing
# only to a data dir and a tmp dir, as the image runs in Kubernetes (readOnlyRootFilesystem).
# It ingests the sample help centre and asks one question. Slow (a fresh pip install, ~2-5 min):
# not part of `make test`; run it after changing the Dockerfile, pyproject.toml or the lock.
#
#   bash scripts/replay_docker_build.sh [WORKDIR]      (default: a new temp dir)
#   REUSE=1 bash scripts/replay_docker_build.sh WORKDIR  (skip the install if WORKDIR has one)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${1:-$(mktemp -d)}"
PY="${PYTHON:-python3}"
if [[ "${REUSE:-0}" == 1 && -x "$WORK/venv/bin/candor" ]]; then
  echo "reusing the install in $WORK/venv"
else
echo "replaying the build stage in $WORK"
rm -rf "$WORK/src" "$WORK/venv"
mkdir -p "$WORK/src"
# The build context .dockerignore lets through.
cp -r "$ROOT"/{pyproject.toml,requirements.lock,candor,retrieval_svc,gate_svc,generator_svc,evals} "$WORK/src/"
find "$WORK/src" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
cd "$WORK/src"
"$PY" -m venv "$WORK/venv"
# Same commands as the Dockerfile's build stage.
"$PY" -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > "$WORK/requirements.txt"
"$WORK/venv/bin/pip" install -q --no-cache-dir -c requirements.lock -r "$WORK/requirements.txt"
"$WORK/venv/bin/pip" install -q --no-cache-dir --no-deps .
"$WORK/venv/bin/python" -m compileall -q "$WORK/venv"
(cd /tmp && HF_HUB_OFFLINE=1 "$WORK/venv/bin/python" -c "from retrieval_svc.embed.minilm import MiniLMEmbedder as M; assert M().embed(['warm up']).shape == (1, M.dim)")
"$WORK/venv/bin/candor" serve --help > /dev/null
echo "build stage OK"
fi

rm -rf "$WORK/run" && mkdir -p "$WORK/run/data" "$WORK/run/tmp"
# Free ports, so a candor already running on the defaults cannot answer in our place.
read -r RP RM GP GM NP NM < <("$PY" -c '
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
')
export CANDOR_RETRIEVAL__SERVER__PORT=$RP CANDOR_RETRIEVAL__SERVER__METRICS_PORT=$RM \
  CANDOR_GATE__SERVER__PORT=$GP CANDOR_GATE__SERVER__METRICS_PORT=$GM \
  CANDOR_GENERATOR__SERVER__PORT=$NP CANDOR_GENERATOR__SERVER__METRICS_PORT=$NM \
  CANDOR_GATE__RETRIEVAL_TARGET=127.0.0.1:$RP CANDOR_GATE__GENERATOR_TARGET=127.0.0.1:$NP
unshare -m --propagation private bash -euo pipefail -c '
  WORK="$1"; ROOT="$2"
  mount --bind "$WORK/venv" "$WORK/venv" && mount -o remount,bind,ro "$WORK/venv"
  if touch "$WORK/venv/.probe" 2>/dev/null; then echo "install tree is not read-only"; exit 1; fi
  export HOME="$WORK/run/tmp" XDG_CACHE_HOME="$WORK/run/tmp/.cache" TMPDIR="$WORK/run/tmp" \
    PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 CANDOR_DATA_DIR="$WORK/run/data"
  cd "$WORK/run/data"
  pids=()
  for s in gate retrieval generator; do   # gate first: it creates the embedded signing key
    "$WORK/venv/bin/candor" serve --service "$s" > "$WORK/run/$s.log" 2>&1 & pids+=($!)
    sleep 5
  done
  trap "kill ${pids[*]} 2>/dev/null; wait" EXIT
  for pid in "${pids[@]}"; do kill -0 "$pid" || { tail -n 20 "$WORK"/run/*.log; exit 1; }; done
  "$WORK/venv/bin/candor" ingest "$ROOT/samples/helpcentre" --target "127.0.0.1:$CANDOR_RETRIEVAL__SERVER__PORT" > "$WORK/run/ingest.log" 2>&1
  "$WORK/venv/bin/candor" ask "How long do I have to get a refund for a label I did not use?" \
    --target "127.0.0.1:$CANDOR_GATE__SERVER__PORT" | tee "$WORK/run/ask.log"
  grep -q "verified" "$WORK/run/ask.log"
' _ "$WORK" "$ROOT"
echo "read-only run OK (logs: $WORK/run)"
