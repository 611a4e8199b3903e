#!/usr/bin/env bash
# Installs the Debian packages ddl needs to build, test and benchmark, if any are missing.
# Runs apt-get as root (or through sudo). Safe to run again: it installs only what is absent.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  ccache  # cmake/compile_flags.cmake: the wheel's build reuses the project build's objects
  libucx-dev ucx-utils libhwloc-dev hwloc libibverbs-dev librdmacm-dev
  libcriterion-dev
  openmpi-bin libopenmpi-dev libpmix-dev
  slurmctld slurmd slurm-client  # tests/tools/test_slurm.sh: a real Slurm on emulated hosts
  graphviz python3
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: everything is installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
