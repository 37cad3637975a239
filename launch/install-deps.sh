#!/usr/bin/env bash
# Installs the packages ringtrain builds with, only those missing. Debian 12 and Ubuntu 24.04.
set -euo pipefail
pkgs=(build-essential cmake libopenmpi-dev openmpi-bin libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
      libgtest-dev python3 python3-yaml python3-matplotlib)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
