#!/usr/bin/env bash
# Installs the Debian 12 packages fusesim builds with, only those missing. Non-interactive.
set -euo pipefail
# clang and its libFuzzer/sanitizer runtimes (only Recommended by clang-14, so named) build fuzz/;
# zlib writes gzip-compressed traces; jemalloc is the fusesim executable's allocator (CMakeLists.txt).
packages=(cmake g++ make libboost-graph-dev nlohmann-json3-dev libfmt-dev libcli11-dev catch2 libbenchmark-dev python3 gnuplot-nox
          zlib1g-dev libjemalloc-dev clang libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
