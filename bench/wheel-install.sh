#!/usr/bin/env bash
# The one install (issue 45.4): the wheel of `make wheel` (release) and the dev-profile wheel
# `make test` builds: their size and what takes it, their tag, the newest glibc symbol the `cellar`
# binary needs, and how long a user's install takes: a fresh virtual environment, then `pip install
# --no-index` of the wheel with no Rust on the PATH (three rounds, wall seconds of bash's `time`),
# checked to give `cellar` and `import cellar`. From the checkout's root; builds both wheels (the
# release one needs release builds of the CLI and the extension module: minutes when they are
# stale). Writes bench/results/wheel.md. Scratch space: $WORK (default /tmp/cellar-wheel).
set -euo pipefail
R=${RESULTS:-bench/results}
W=${WORK:-/tmp/cellar-wheel}
PY=${PYTHON:-python3}
OUT=$R/wheel.md
rm -rf "$W"
mkdir -p "$W" "$R"

# Builds the wheel of a profile into $W/<profile>/, checked to carry that profile's binary (not one
# rebuilt since by another build in this checkout).
build() {
  local profile=$1 dir
  dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
  make --no-print-directory wheel WHEEL_PROFILE="$profile" WHEEL_DIR="$W/$profile" PYTHON="$PY" >"$W/make-$profile.log" 2>&1
  strip -o "$W/$profile/expected" "target/$dir/cellar"
  "$PY" - "$W/$profile"/cellar-*.whl "$W/$profile/expected" <<'EOF'
import sys, zipfile
wheel, expected = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".data/scripts/cellar"))
    if z.read(name) != open(expected, "rb").read():
        sys.exit(f"{wheel}: its cellar binary is not the profile's (another build raced this one?)")
EOF
}

# One round: a fresh venv, then pip install of the wheel; prints "venv_s pip_s".
round() {
  local wheel=$1 d venv_s pip_s
  d=$(mktemp -d "$W/round.XXXX")
  TIMEFORMAT=%R
  venv_s=$({ time "$PY" -m venv "$d/venv" >/dev/null; } 2>&1)
  pip_s=$({ time env -i PATH="$d/venv/bin:/usr/bin:/bin" HOME="$d" PIP_CONFIG_FILE=/dev/null \
    python -m pip install -q --no-index --no-cache-dir --disable-pip-version-check "$wheel" >/dev/null; } 2>&1)
  env -i PATH="$d/venv/bin:/usr/bin:/bin" HOME="$d" bash -c \
    '! command -v cargo && ! command -v rustc && cellar --version && python -c "import cellar"' >/dev/null
  rm -rf "$d"
  echo "$venv_s $pip_s"
}

# A table row for one wheel: sizes in MB (10^6 bytes), install rounds.
row() {
  local profile=$1 wheel rounds venvs pips
  wheel=$(ls "$W/$profile"/cellar-*.whl)
  rounds=$(for _ in 1 2 3; do round "$wheel"; done)
  venvs=$(echo "$rounds" | awk '{print $1}' | paste -sd/ -)
  pips=$(echo "$rounds" | awk '{print $2}' | paste -sd/ -)
  "$PY" - "$wheel" "$profile" "$venvs" "$pips" <<'EOF'
import os, sys, zipfile
wheel, profile, venvs, pips = sys.argv[1:]
mb = lambda n: f"{n / 1e6:.1f}"
with zipfile.ZipFile(wheel) as z:
    infos = z.infolist()
    binary = next(i for i in infos if i.filename.endswith(".data/scripts/cellar"))
    module = next(i for i in infos if i.filename.startswith("cellar/_cellar.") and i.filename.endswith(".so"))
    rest = sum(i.compress_size for i in infos) - binary.compress_size - module.compress_size
tag = os.path.basename(wheel).split("-", 2)[2].removesuffix(".whl")
print(f"| {profile} | `{tag}` | {mb(os.path.getsize(wheel))} | {mb(binary.file_size)} → {mb(binary.compress_size)} "
      f"| {mb(module.file_size)} → {mb(module.compress_size)} | {mb(rest)} | {venvs} | {pips} |")
EOF
}

build release
build dev
# The newest glibc symbol version an ELF file needs ("2.N"), and the symbols that need it.
glibc() { objdump -T "$1" | sed -n 's/.*GLIBC_\(2\.[0-9]*\).*/\1/p' | sort -t. -k2 -n | tail -1; }
symbols() { objdump -T "$1" | awk -v v="(GLIBC_$2)" 'index($0, v) {print $NF}' | sort -u | paste -sd, -; }
unzip -p "$W/release"/cellar-*.whl 'cellar/_cellar.*.so' >"$W/module.so"
need=$(glibc "$W/release/expected")
module_need=$(glibc "$W/module.so")

{
  echo "# The one install: the wheel's size and install time"
  echo
  echo "Command: \`bash bench/wheel-install.sh\` at $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d)."
  echo "Machine: $(lscpu | grep 'Model name' | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores; $(. /etc/os-release; echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}'); $("$PY" --version), pip $("$PY" -m pip --version | awk '{print $2}')."
  echo
  echo "The wheels of \`make wheel\` (release) and of \`make wheel WHEEL_PROFILE=dev\` (what \`make test\`"
  echo "installs). Sizes in MB (10^6 bytes); \`a → b\`: a file's size, then what it takes compressed in"
  echo "the wheel; \"the rest\": the Python sources, stub and metadata, compressed. A round is a fresh"
  echo "\`python3 -m venv\` (it installs pip itself: \"venv s\"), then \`pip install --no-index\` of the"
  echo "wheel with PATH=the venv's bin:/usr/bin:/bin (no cargo, no rustc: \"pip install s\"), then"
  echo "\`cellar --version\` and \`import cellar\` are checked to work. Three rounds each, wall seconds."
  echo
  echo "| wheel | tag | wheel MB | \`cellar\` binary MB | extension module MB | the rest MB | venv s | pip install s |"
  echo "|---|---|---|---|---|---|---|---|"
  row release
  row dev
  echo
  echo "The newest glibc symbol versions needed: the release \`cellar\` binary GLIBC_$need"
  echo "($(symbols "$W/release/expected" "$need")), the extension module GLIBC_$module_need ($(symbols "$W/module.so" "$module_need"))."
  echo "maturin's audit of the extension module chose the tag; \`make wheel\` checks the binary against it."
} >"$OUT"
cat "$OUT"
