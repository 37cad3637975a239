#!/usr/bin/env bash
# Launches `ringtrain train` on dp*cp*tp ranks, read from the config's parallel section after --set overrides.
#   launch/train.sh <config.yaml> [--set key=value ...] [-- extra mpirun flags ...]
# Examples:
#   launch/train.sh configs/tiny-copy.yaml --set parallel.cp=4
#   launch/train.sh configs/gpt-1b-256k.yaml -- --hostfile hosts --map-by ppr:8:node
# BUILD_DIR picks the build (default build/). RINGTRAIN_DRY_RUN=1 prints the command instead of running it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
usage() { echo "usage: $0 <config.yaml> [--set key=value ...] [-- extra mpirun flags ...]" >&2; exit 2; }

[ $# -ge 1 ] || usage
config="$1"
shift
[ -f "$config" ] || { echo "train.sh: config file '$config' not found" >&2; exit 2; }
sets=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --set) [ $# -ge 2 ] || usage; sets+=("$2"); shift 2 ;;
    --set=*) sets+=("${1#--set=}"); shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "train.sh: unexpected argument '$1' (mpirun flags go after --)" >&2; usage ;;
  esac
done

# parallel.<key> from block-style YAML: the first "  key: value" under the top-level "parallel:" line.
config_value() {
  awk -v key="$1" '
    /^[^ \t#]/ { in_parallel = ($0 ~ /^parallel:[ \t]*(#.*)?$/); next }
    in_parallel && $0 ~ "^[ \t]+" key ":" {
      sub(/#.*/, ""); sub("^[ \t]+" key ":[ \t]*", ""); gsub(/[ \t\r\"\047]/, ""); print; exit
    }' "$config"
}
dp="$(config_value dp)"; cp="$(config_value cp)"; tp="$(config_value tp)"
for s in ${sets[@]+"${sets[@]}"}; do
  case "$s" in
    parallel.dp=*) dp="${s#*=}" ;;
    parallel.cp=*) cp="${s#*=}" ;;
    parallel.tp=*) tp="${s#*=}" ;;
  esac
done
dp="${dp:-1}"; cp="${cp:-1}"; tp="${tp:-1}"
for pair in "dp=$dp" "cp=$cp" "tp=$tp"; do
  [[ "${pair#*=}" =~ ^[1-9][0-9]*$ ]] || { echo "train.sh: parallel.${pair%%=*} must be a positive integer, got '${pair#*=}'" >&2; exit 2; }
done
np=$((dp * cp * tp))

bin="$build/ringtrain"
set_args=()
for s in ${sets[@]+"${sets[@]}"}; do set_args+=(--set "$s"); done
cmd=(mpirun -np "$np" --oversubscribe ${extra[@]+"${extra[@]}"} "$bin" train "$config" ${set_args[@]+"${set_args[@]}"})
echo "train.sh: dp=$dp cp=$cp tp=$tp -> $np ranks" >&2
if [ -n "${RINGTRAIN_DRY_RUN:-}" ]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
[ -x "$bin" ] || { echo "train.sh: $bin not found; build first (launch/build.sh) or set BUILD_DIR" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "${cmd[@]}"
