#!/usr/bin/env bash
# Launches `ringtrain train` on dp*cp*tp ranks, read from the config's parallel section after --set overrides.
#   launch/train.sh <config.yaml> [--set key=value ...] [-- extra mpirun flags ...]
# Examples:
#   launch/train.sh configs/tiny-copy.yaml --set parallel.cp=4
#   launch/train.sh configs/gpt-1b-256k.yaml -- --hostfile hosts --map-by ppr:8:node
# BUILD_DIR picks the build (default build/). RINGTRAIN_DRY_RUN=1 prints the command instead of running it.
#
# Signals: Open MPI's mpirun, on SIGINT or SIGTERM, forwards the signal and SIGKILLs the ranks about a second
# later, which can kill a checkpoint half written. This script therefore runs mpirun in a session of its own
# (so Ctrl-C in the terminal reaches only this script) and turns INT, TERM and USR1 into a SIGUSR1 for mpirun,
# which forwards it without a kill. The ranks finish the step, save a complete checkpoint and stop; this script
# then exits with 128 + the number of the signal it received (130 for Ctrl-C, 143 for SIGTERM, 138 for USR1).
# A second signal gives up on the save: mpirun gets SIGTERM and ends the ranks within about a second (the last
# complete checkpoint stays); this script keeps waiting for it, then exits with 128 + the first signal's number
# too (130, 143), with a closing line, unless a rank reported an error. A third signal SIGKILLs every process of mpirun's
# session (mpirun and the ranks, which have process groups of their own) and says so. Whatever ends mpirun, a
# process of its session still alive afterwards is killed, so this script never leaves one running. mpirun runs in
# its own session, so `kill -9` of this script alone leaves it running.
# Errors: the ranks also write their error line to a file; it is printed again after mpirun exits, so it is
# the last thing on the screen.
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
errors="$(mktemp "${TMPDIR:-/tmp}/ringtrain-errors.XXXXXX")"
export RINGTRAIN_ERROR_FILE="$errors"
mpirun_pid=""  # set once mpirun runs
got_signal=0  # the first signal received (its number)
signals=0     # how many were received
job_pids() {  # the live processes of mpirun's session: mpirun and the ranks (each rank has a process group of its own)
  local f stat state ppid pgrp sid
  for f in /proc/[0-9]*/stat; do
    { read -r stat <"$f"; } 2>/dev/null || continue
    read -r state ppid pgrp sid _ <<<"${stat##*) }"
    if [ "$sid" = "$mpirun_pid" ] && [ "$state" != Z ]; then echo "${f//[^0-9]/}"; fi
  done
}
kill_job() {  # SIGKILL to every process of mpirun's session, until none is left
  local pids tries=0
  kill -KILL -- "-$mpirun_pid" 2>/dev/null || true
  while pids="$(job_pids)" && [ -n "$pids" ] && [ "$tries" -lt 50 ]; do
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    tries=$((tries + 1))
    sleep 0.1
  done
}
forward() {  # $1: the signal this script received. Returns 0: under set -e, a non-zero status would end the script.
  signals=$((signals + 1))
  if [ "$signals" -eq 1 ]; then
    got_signal=$1
    echo "train.sh: signal $1 received; asking the ranks to finish the step, save and stop (SIGUSR1 to mpirun;" \
         "a second signal stops them at once)" >&2 || true
    kill -USR1 "$mpirun_pid" 2>/dev/null || true
  elif [ "$signals" -eq 2 ]; then
    echo "train.sh: second signal ($1): stopping the ranks now, without waiting for the save (SIGTERM to mpirun);" \
         "waiting for them to end (a third signal kills them)" >&2 || true
    kill -TERM "$mpirun_pid" 2>/dev/null || true
  else
    echo "train.sh: signal $1 again: killing mpirun and every rank (SIGKILL to the job's session); a checkpoint" \
         "being written is left incomplete, the last complete one stays" >&2 || true
    kill_job
  fi
  return 0
}
trap 'forward 2' INT
trap 'forward 15' TERM
trap 'forward 10' USR1
# mpirun's stderr passes through tee (which ignores the signals) into a side file, so that a rank that died (for
# example killed by the OOM killer) can be named again at the end.
mpirun_err="$errors.mpirun"
fifo="$errors.fifo"
mkfifo "$fifo"
(trap '' INT TERM USR1; exec tee "$mpirun_err" <"$fifo" >&2) &
tee_pid=$!
setsid "${cmd[@]}" 2>"$fifo" &
mpirun_pid=$!
rc=0
while :; do
  before=$signals
  rc=0
  wait "$mpirun_pid" || rc=$?
  [ "$signals" -ne "$before" ] || break          # mpirun ended: rc is its status
  kill -0 "$mpirun_pid" 2>/dev/null && continue  # a trapped signal cut the wait short: wait again
  # mpirun ended around the signal (bash may have reaped it meanwhile): its status, kept by bash, unless the wait
  # above had already taken it (127 then)
  again=0
  wait "$mpirun_pid" 2>/dev/null || again=$?
  [ "$again" -eq 127 ] || rc=$again
  break
done
trap - INT TERM USR1
# mpirun has ended; nothing of its job may outlive it (a rank it failed to end, or one left when mpirun was killed).
left="$(job_pids)"
if [ -n "$left" ]; then
  echo "train.sh: $(echo "$left" | wc -l) process(es) of the job outlived mpirun; killing them (SIGKILL)" >&2
  kill_job
fi
wait "$tee_pid" 2>/dev/null || true
reported_error=0
if [ -s "$errors" ]; then
  reported_error=1
  echo "train.sh: the job failed (exit $rc):" >&2
  sort -u "$errors" >&2
elif [ "$rc" -ne 0 ] && grep -q "exited on signal" "$mpirun_err" 2>/dev/null; then
  # No rank reported an error: one died. mpirun's banner names it; say it again, last.
  died=$(grep -o "process rank [0-9]* with PID [0-9]* on node [^ ]* exited on signal [0-9]*[^.]*" "$mpirun_err" | head -n 1)
  echo "train.sh: the job failed (exit $rc): $died; continue from the last checkpoint with --set checkpoint.resume=auto" >&2
fi
rm -f "$errors" "$mpirun_err" "$fifo"
# The ranks stop with 128 + the signal they saw (USR1); report the one this script was sent.
if [ "$got_signal" -ne 0 ] && [ "$rc" -eq $((128 + 10)) ]; then
  rc=$((128 + got_signal))
  echo "train.sh: stopped on signal $got_signal after a complete save (exit $rc); continue with --set checkpoint.resume=auto" >&2
elif [ "$signals" -eq 2 ] && [ "$reported_error" -eq 0 ] && [ "$rc" -ne 0 ]; then
  # The second signal stopped the ranks without waiting for the save (mpirun then ends 1, or with the ranks' 143).
  rc=$((128 + got_signal))
  echo "train.sh: stopped on signal $got_signal by a second signal, without waiting for the save (exit $rc); the" \
       "last complete checkpoint stays: continue with --set checkpoint.resume=auto" >&2
fi
exit "$rc"
