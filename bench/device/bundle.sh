#!/usr/bin/env bash
# Builds build/device/, what bench/device/scaleout.sh needs on the lent device machine (no Java, no
# network there): rocketmq.tar.xz, a ROCKETMQ_HOME layout of the stock 4.9.8 launchers (bin/), conf/,
# the jars in bench/device/jars (lib/) and a Java runtime jlinked from the modules in
# bench/device/jre-modules (jre/); and wheels/, cp312 manylinux wheels of pyproject's construct, lmdb,
# zstandard (missing there) and uvloop (there, but at a version not ours to choose). Checks that it and
# the repository's files stay under the device's 64 MiB.
#
#   bench/device/bundle.sh      (make device-bundle)
#
# bench/device/bundle.sh --local-wheels: only fetch, into build/device-local/wheels (never carried),
# wheels for this machine's $LOCAL_PYTHON (python3) of what scaleout.sh imports and it lacks, for a
# rehearsal of scaleout.sh here (WHEELS=build/device-local/wheels).
# JDK, RMQ_DIST (the stock distribution) and DEVICE_BUNDLE (the output folder) override the defaults.
#
# jlink runs with --compress=0: the runtime travels inside an xz tarball, and jlink's own zip
# compression of lib/modules leaves xz little to do (28 MB against 17 MB for the same runtime).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
JDK=${JDK:-/usr/lib/jvm/java-17-openjdk-amd64}
RMQ_DIST=${RMQ_DIST:-$repo/../shared/rocketmq-java}
out=${DEVICE_BUNDLE:-$repo/build/device}
local_wheels=$repo/build/device-local/wheels
limit=$((64 * 1024 * 1024))
device_python=3.12
LOCAL_PYTHON=${LOCAL_PYTHON:-python3}

listed() { grep -v -e '^#' -e '^[[:space:]]*$' "$1"; }

# the versions pyproject.toml allows, never a second copy of them
mapfile -t specs < <(python3 - "$repo/pyproject.toml" <<'EOF'
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
print("\n".join(d for d in deps if re.match(r"(construct|lmdb|zstandard|uvloop)\b", d, re.IGNORECASE)))
EOF
)

if [[ ${1:-} == --local-wheels ]]; then
  rm -rf "$local_wheels" && mkdir -p "$local_wheels"
  # scaleout.sh's imports that the device has (PyYAML, prometheus-client, pytest for compat_tests) and
  # this python3 may not
  need=("${specs[@]}")
  for pair in yaml:PyYAML prometheus_client:prometheus-client pytest:pytest; do
    "$LOCAL_PYTHON" -c "import ${pair%%:*}" 2>/dev/null || need+=("${pair#*:}")
  done
  "$LOCAL_PYTHON" -m pip download -q --only-binary=:all: -d "$local_wheels" "${need[@]}"
  echo "wheels for $("$LOCAL_PYTHON" --version) in $local_wheels: $(ls "$local_wheels" | tr '\n' ' ')"
  exit 0
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/rmqgate-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
home=$stage/rocketmq
mkdir -p "$home/lib"
cp -r "$RMQ_DIST/bin" "$RMQ_DIST/conf" "$home/"
while read -r jar; do cp "$RMQ_DIST/lib/$jar" "$home/lib/"; done < <(listed "$here/jars")
chmod -R u+w "$home" # the distribution may be read-only
"$JDK/bin/jlink" --add-modules "$(listed "$here/jre-modules" | paste -sd, -)" \
  --strip-debug --no-man-pages --no-header-files --compress=0 --output "$home/jre"
# Debian's libjvm.so keeps its symbol table (4 MB); the JVM does not need it
if command -v strip >/dev/null; then strip --strip-unneeded "$home/jre/lib/server/libjvm.so"; fi
"$home/jre/bin/java" -version 2>&1 | head -1

rm -rf "$out"
mkdir -p "$out/wheels"
tar -C "$stage" -cf - rocketmq | xz -6 -T2 >"$out/rocketmq.tar.xz"

platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$device_python" --implementation cp \
  "${platforms[@]}" -d "$out/wheels" "${specs[@]}"

{
  echo "built $(date -u +%FT%TZ) from $RMQ_DIST and $JDK"
  echo "jre modules: $(listed "$here/jre-modules" | paste -sd' ' -)"
  echo "jars: $(listed "$here/jars" | wc -l)"
  if command -v objdump >/dev/null; then
    echo "the runtime needs glibc >= $(find "$home/jre" -name '*.so' -o -path '*/bin/*' -type f | xargs objdump -T 2>/dev/null |
      grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | cut -d_ -f2)"
  fi
  echo "wheels: $(cd "$out/wheels" && ls | paste -sd' ' -)"
} >"$out/MANIFEST"

# what travels: tracked files, untracked files git does not ignore, and this folder
bundle=$(du -sb "$out" | cut -f1)
tree=$(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null |
  awk '{s += $1} END {print s + 0}')
echo "rocketmq.tar.xz $(du -h "$out/rocketmq.tar.xz" | cut -f1), wheels $(du -sh "$out/wheels" | cut -f1)"
echo "bundle $((bundle / 1024 / 1024)) MiB + repository $((tree / 1024 / 1024)) MiB = $(((bundle + tree) / 1024 / 1024)) MiB of the device's 64 MiB"
if ((bundle + tree > limit)); then
  echo "too large for the device's working tree (64 MiB)" >&2
  exit 1
fi
