#!/usr/bin/env bash
# The scale-out curve in one run on a 16-core machine without Java or a network: copy build/device/
# (make device-bundle builds it) beside this checkout, then `bash bench/device/scaleout.sh`.
# Unpacks build/device/rocketmq.tar.xz (the stock 4.9.8 launchers, jars and a jlinked JRE), installs
# its wheels into a temporary folder, makes this checkout importable as rmqgate (pyproject's
# package-dir, no install), then runs bench/broker.py --brokers 1 2 4 8 next to the stock Java broker.
# Into $OUT: log (everything printed), scaleout.csv (one row per run), scaleout.md (the table) and,
# where matplotlib is installed, scaleout.png (aggregate sends/s against N, with 0.8 x N x one broker).
#
# Knobs (environment): BROKERS ("1 2 4 8"), ROUNDS (2), WARMUP (8 s), WINDOW (20 s), THREADS (8 per
# Producer JVM), BENCH_TIMEOUT (480 s for the bench, so the whole run ends inside 10 minutes),
# SERVER_CPUS / PRODUCER_CPUS (taskset lists pinning the servers / the Producer JVMs; default: unpinned),
# DEVICE_BUNDLE (build/device), WHEELS (its wheels/: another python's, for a rehearsal elsewhere).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bundle=${DEVICE_BUNDLE:-$repo/build/device}
WHEELS=${WHEELS:-$bundle/wheels}
OUT=${OUT:-$repo/build/device-out}
BROKERS=${BROKERS:-1 2 4 8}
ROUNDS=${ROUNDS:-2}
WARMUP=${WARMUP:-8}
WINDOW=${WINDOW:-20}
THREADS=${THREADS:-8}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-480}

run() {
  set -e
  cd "$repo"
  echo "== $(date -u +%FT%TZ) $(uname -srm)"
  echo "nproc $(nproc); uptime: $(uptime 2>/dev/null || cat /proc/loadavg); $(grep MemTotal /proc/meminfo)"
  echo "python: $(command -v python3) $(python3 --version 2>&1)"
  echo "java on PATH before the bundle's: $(command -v java || echo none)"
  echo "taskset: $(command -v taskset || echo none)"
  if [[ ! -f $bundle/rocketmq.tar.xz ]]; then
    echo "no $bundle/rocketmq.tar.xz: run make device-bundle and copy build/device here" >&2
    return 2
  fi
  cat "$bundle/MANIFEST"

  work=$(mktemp -d "${TMPDIR:-/tmp}/rmqgate-device.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  if command -v xz >/dev/null; then
    tar -C "$work" -xJf "$bundle/rocketmq.tar.xz"
  else
    python3 -c 'import sys, tarfile
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))' \
      "$bundle/rocketmq.tar.xz" "$work"
  fi
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --target "$work/site" "$WHEELS"/*.whl
  # rmqgate.<part> -> <folder> as pyproject's package-dir maps them, by links (nothing to build)
  python3 - "$repo" "$work/path/rmqgate" <<'EOF'
import re
import sys
from pathlib import Path

repo, target = Path(sys.argv[1]), Path(sys.argv[2])
text = (repo / "pyproject.toml").read_text()
package_dir = re.search(r"^package-dir\s*=\s*\{(.*)\}", text, re.MULTILINE).group(1)
target.mkdir(parents=True)
for name, folder in re.findall(r'"rmqgate\.(\w+)"\s*=\s*"([^"]+)"', package_dir):
    (target / name).symlink_to(repo / folder)
EOF
  export PYTHONPATH=$work/site:$work/path PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
  export ROCKETMQ_HOME=$work/rocketmq JAVA=$work/rocketmq/jre/bin/java
  export PATH=$work/rocketmq/jre/bin:$PATH
  if ! "$JAVA" -version >/dev/null 2>&1; then
    echo "the bundled java does not run here (glibc $(getconf GNU_LIBC_VERSION 2>/dev/null)):" >&2
    "$JAVA" -version
    return 3
  fi
  echo "java: $(command -v java): $("$JAVA" -version 2>&1 | head -1); $(getconf GNU_LIBC_VERSION 2>/dev/null)"
  python3 -c 'import construct, lmdb, zstandard; from rmqgate.server import broker
from rmqgate.compat_tests import java
print("rmqgate from", broker.__file__, "- construct", construct.__version__, "lmdb", lmdb.__version__,
      "zstandard", zstandard.__version__, "- uvloop:", __import__("importlib.util").util.find_spec("uvloop") is not None)
print("stock RocketMQ at", java.rocketmq_home(), "-", java.missing(compiler=False) or "runnable")'

  pin=()
  [[ -n ${SERVER_CPUS:-} ]] && pin+=(--server-cpus "$SERVER_CPUS")
  [[ -n ${PRODUCER_CPUS:-} ]] && pin+=(--producer-cpus "$PRODUCER_CPUS")
  rm -f "$OUT/scaleout.csv"
  set +e
  # shellcheck disable=SC2086  # BROKERS is a list of numbers
  timeout -k 10 "$BENCH_TIMEOUT" python3 bench/broker.py --brokers $BROKERS --rounds "$ROUNDS" \
    --warmup "$WARMUP" --seconds "$WINDOW" --threads "$THREADS" --csv "$OUT/scaleout.csv" "${pin[@]}"
  status=$?
  ((status == 124)) && echo "bench/broker.py stopped after BENCH_TIMEOUT=$BENCH_TIMEOUT s: the runs so far follow"
  python3 bench/device/report.py "$OUT/scaleout.csv" --out "$OUT" || status=1
  echo "== $(date -u +%FT%TZ) done, status $status; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  return "$status"
}

mkdir -p "$OUT"
run 2>&1 | tee "$OUT/log"
exit "${PIPESTATUS[0]}"
