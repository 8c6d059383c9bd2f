# scripts/lib.sh: shared set-up for the entry points (sourced, not run).
#
# anvil_setup: installs missing Debian packages (when root with apt), picks the
# Python interpreter with torch (ANVIL_PYTHON, else python3 if it has torch,
# else ./.venv, created from python/requirements.txt), and builds build/anvil
# with CMake. On a machine without the -dev packages (the GPU host), a
# prebuilt build/anvil carried there is used as it is.
set -euo pipefail
ANVIL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ANVIL_ROOT"

DEB_PACKAGES="cmake ninja-build g++ libgtest-dev libgmock-dev nlohmann-json3-dev rapidjson-dev libcli11-dev libssl-dev libcurl4-openssl-dev libsqlite3-dev libboost-dev libseccomp-dev bubblewrap python3-venv chromium"

say() { printf '\033[1m[anvil]\033[0m %s\n' "$*"; }

have_build_deps() {
  command -v cmake >/dev/null && command -v g++ >/dev/null &&
    [ -f /usr/include/nlohmann/json.hpp ] && [ -f /usr/include/CLI/CLI.hpp ] && [ -f /usr/include/openssl/evp.h ] && [ -f /usr/include/x86_64-linux-gnu/curl/curl.h -o -f /usr/include/curl/curl.h ] &&
    [ -f /usr/include/sqlite3.h ] && [ -f /usr/include/boost/beast.hpp ] && [ -f /usr/include/rapidjson/reader.h ]
}

install_debian_packages() {
  local missing=()
  for p in $DEB_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian packages: ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    say "missing packages: ${missing[*]} (install them with: sudo apt-get install ${missing[*]})"
    return 1
  fi
}

# anvil's own package importable from anywhere in .venv (`python -m anvil.rl.train`, veRL's workers):
# a .pth file naming python/ (what an editable install of python/pyproject.toml amounts to, offline).
install_anvil_package() {
  local py=$1 site
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  [ "$(cat "$site/anvil-checkout.pth" 2>/dev/null)" = "$ANVIL_ROOT/python" ] || echo "$ANVIL_ROOT/python" >"$site/anvil-checkout.pth"
}

pick_python() {
  if [ -n "${ANVIL_PYTHON:-}" ]; then
    return 0
  fi
  if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch, pytest" 2>/dev/null; then
    ANVIL_PYTHON=$ANVIL_ROOT/.venv/bin/python
    if ! cmp -s python/requirements.txt .venv/.anvil-requirements; then
      say "python/requirements.txt changed since .venv was made: installing it"
      .venv/bin/pip install -q -r python/requirements.txt && cp python/requirements.txt .venv/.anvil-requirements
    fi
    install_anvil_package .venv/bin/python
  elif python3 -c "import torch" 2>/dev/null; then
    ANVIL_PYTHON=$(python3 -c "import sys; print(sys.executable)")
  else
    say "creating .venv with torch (CPU use is fine) from python/requirements.txt; this downloads ~3 GB once"
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -r python/requirements.txt
    cp python/requirements.txt .venv/.anvil-requirements
    install_anvil_package .venv/bin/python
    ANVIL_PYTHON=$ANVIL_ROOT/.venv/bin/python
  fi
  export ANVIL_PYTHON
}

build_anvil() {
  if [ -n "${ANVIL_BIN:-}" ] && [ -x "${ANVIL_BIN}" ]; then
    say "using the prebuilt $ANVIL_BIN"
  elif have_build_deps; then
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build build
    ANVIL_BIN=$ANVIL_ROOT/build/anvil
  elif [ -x build/anvil ]; then
    say "no build dependencies here: using the prebuilt build/anvil"
    ANVIL_BIN=$ANVIL_ROOT/build/anvil
  else
    say "cannot build anvil: install the Debian packages listed in README.md"
    return 1
  fi
  ANVIL_BIN=$(cd "$(dirname "$ANVIL_BIN")" && pwd)/$(basename "$ANVIL_BIN")
  export ANVIL_BIN
  export PATH="$(dirname "$ANVIL_BIN"):$PATH"
}

anvil_setup() {
  # Packages are needed only to build; a machine with a prebuilt binary needs none.
  if ! have_build_deps && ! { [ -n "${ANVIL_BIN:-}" ] && [ -x "${ANVIL_BIN}" ]; } && [ ! -x build/anvil ]; then
    install_debian_packages || true
  fi
  pick_python
  build_anvil "$@"
}

gpu_available() {
  "$ANVIL_PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
}
