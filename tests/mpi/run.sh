#!/usr/bin/env bash
# The CLI under mpirun on the fixtures (ctest label `mpi`, tests/CMakeLists.txt): checkpoints and
# perplexities byte-identical to one plain process for K = 2 and 3 ranks, a resume with another K, a
# killed rank. Small calibration sets (6 windows of 64 tokens in batches of 2: 3 batches, one per rank
# at K = 3) keep each case to seconds. In the identical case joint up-down runs in units of 96 tokens
# (4 units: 2 + 2 at K = 2, 1 + 1 + 2 at K = 3), so its token passes are split across the ranks.
#
# Usage: tests/mpi/run.sh CASE CLI SHARED     CASE: identical | resume | killed
set -euo pipefail
CASE=$1 CLI=$2 SHARED=$3
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
WT2=$SHARED/data/wikitext2/wiki.test.raw
TMP=$(mktemp -d "${TMPDIR:-/tmp}/latentllm-mpi.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() { echo "tests/mpi/run.sh $CASE: $*" >&2; exit 1; }

# ranks(K, args...): the CLI on K ranks (K = 0: a plain process, no mpirun).
ranks() {
  local k=$1
  shift
  if [ "$k" = 0 ]; then "$CLI" "$@"; else "${MPIRUN[@]}" -np "$k" "$CLI" "$@"; fi
}
compress() {  # K out model args...
  local k=$1 out=$2 model=$3
  shift 3
  ranks "$k" compress --model "$SHARED/models/$model" --out "$out" --ratio 0.3 --calib c4 --calib-data "$C4" \
    --nsamples "${NSAMPLES:-6}" --seqlen 64 --batch 2 --seed 0 --dtype f32 --threads 1 "$@"
}
digest() { cat "$1/model.safetensors" "$1/config.json" | sha256sum | cut -c1-16; }
# The ranks that ran a stage's decomposition jobs (--json stage_seconds.decompositions_by_job, whose
# objects list "rank" before "stage"), sorted, on one line.
job_ranks() {
  awk -v stage="\"stage\": \"$2\"," '/"rank": [0-9]+,/ { r = $2 } index($0, stage) { print r + 0 }' "$1" |
    sort -un | tr '\n' ' ' | sed 's/ $//'
}

case $CASE in
identical)
  # Joint up-down on 384 tokens: below the default's 12 x ffn, so asked for with --ud-min-tokens-per-ffn 0
  # (the paper's ReLU path on opt-tiny, the extension's gated path on stories260K). asvd-rootcov:
  # module-parallel local stages (q/k/v, gate/up on different ranks); with --lambda 0 the rank-deficient
  # covariances record numerical notes on their owner ranks, replayed into config.json. latentllm: joint
  # Q-K's starts and iterations are jobs on several ranks beside the local v_proj (checked below); with
  # --joint qk,vo the joint V-O group is a job of its own.
  for v in "opt-tiny|--ud-min-tokens-per-ffn 0 --ud-unit-tokens 96" "opt-tiny|--preset paper --ud-unit-tokens 96" \
           "stories260K/hf|--fit compensate --ud-min-tokens-per-ffn 0 --ud-unit-tokens 96" \
           "stories260K/hf|--method asvd-rootcov" "opt-tiny|--method asvd-rootcov --lambda 0" \
           "TinyStories-656K|--joint qk,vo"; do
    model=${v%%|*}
    rm -rf "$TMP"/k?
    read -r -a args <<< "${v#*|}"
    compress 0 "$TMP/k0" "$model" "${args[@]}" > /dev/null 2> "$TMP/k0.err" || { cat "$TMP/k0.err"; fail "plain run"; }
    want=$(digest "$TMP/k0")
    # latentllm's runs must exercise joint up-down's split passes (asvd-rootcov has none).
    [[ " ${args[*]} " == *" --method "* || " ${args[*]} " == *" --joint "* ]] ||
      grep -q "MLP output loss" "$TMP/k0.err" || fail "$model ${args[*]}: joint up-down did not run"
    for k in 2 3; do
      compress "$k" "$TMP/k$k" "$model" "${args[@]}" --json > "$TMP/k$k.json" 2> "$TMP/k$k.err" ||
        { cat "$TMP/k$k.err"; fail "$model ${args[*]}: $k ranks failed"; }
      got=$(digest "$TMP/k$k")
      [ "$got" = "$want" ] || fail "$model ${args[*]}: $k ranks wrote $got, one process $want"
      [ "$(grep -c 'numerics \[' "$TMP/k$k.err")" = "$(grep -c 'numerics \[' "$TMP/k0.err")" ] ||
        fail "$model ${args[*]}: $k ranks logged other numerical notes than one process"
      grep -q "\"ranks\": $k" "$TMP/k$k.json" || fail "$model ${args[*]}: --json without \"ranks\": $k"
      # latentllm: joint Q-K's eigenproblems ran on every rank (its starts are 4 jobs of equal cost), so
      # the joint group's results really came from other ranks.
      if [[ " ${args[*]} " != *" --method "* ]]; then
        owners=$(job_ranks "$TMP/k$k.json" joint-qk)
        [ "$owners" = "$(seq -s ' ' 0 $((k - 1)))" ] ||
          fail "$model ${args[*]}: joint Q-K's jobs ran on ranks '$owners' of $k"
      fi
      grep -q "ranks: $k processes" "$TMP/k$k.err" || fail "$model ${args[*]}: no ranks header on stderr"
    done
    echo "$model ${args[*]}: $want for 1, 2 and 3 ranks ($(grep -c 'numerics \[' "$TMP/k0.err") numerical notes)"
  done
  # ppl: the per-batch NLLs summed in batch order, the same figure as one process.
  for k in 0 2 3; do
    ranks "$k" ppl --model "$TMP/k0" --dataset wikitext2 --data "$WT2" --seqlen 64 --max-windows 7 --batch 2 \
      --threads 1 --json 2> /dev/null | sed -E 's/.*"mean_nll":([^,]*),.*/\1/' > "$TMP/ppl$k"
  done
  cmp -s "$TMP/ppl0" "$TMP/ppl2" && cmp -s "$TMP/ppl0" "$TMP/ppl3" ||
    fail "ppl mean NLL $(cat "$TMP/ppl0") (one process), $(cat "$TMP/ppl2") (2 ranks), $(cat "$TMP/ppl3") (3 ranks)"
  echo "ppl mean NLL $(cat "$TMP/ppl0") for 1, 2 and 3 ranks"
  ;;
resume)
  # 2 ranks stop after layer 3; 3 ranks resume; the bytes of one uninterrupted process.
  compress 0 "$TMP/ref" opt-tiny > /dev/null 2>&1 || fail "plain run"
  compress 2 "$TMP/out" opt-tiny --stop-after-layers 3 > /dev/null 2> "$TMP/stop.err" || { cat "$TMP/stop.err"; fail "stop"; }
  [ -f "$TMP/out.resume/progress.json" ] || fail "no progress after --stop-after-layers"
  compress 3 "$TMP/out" opt-tiny --resume > /dev/null 2> "$TMP/resume.err" || { cat "$TMP/resume.err"; fail "resume"; }
  grep -q "resume: layers 0..2 restored" "$TMP/resume.err" || fail "the resumed run did not restore layers 0..2"
  [ "$(digest "$TMP/out")" = "$(digest "$TMP/ref")" ] || fail "resumed on 3 ranks: $(digest "$TMP/out"), one process $(digest "$TMP/ref")"
  # A progress directory of another run (other options) is refused on every rank, before any work.
  compress 2 "$TMP/other" opt-tiny --stop-after-layers 1 > /dev/null 2>&1 || fail "stop (other)"
  if compress 2 "$TMP/other" opt-tiny --method asvd-rootcov --resume > /dev/null 2> "$TMP/other.err"; then fail "another run's progress was accepted"; fi
  grep -q "resume state of a different run" "$TMP/other.err" || { cat "$TMP/other.err"; fail "no clear refusal"; }
  echo "stopped on 2 ranks, resumed on 3: $(digest "$TMP/out") as one process"
  ;;
killed)
  # Rank 1 killed during layer 2 or later: the run ends with an error naming the rank within seconds
  # (no hang), the progress stays, and a resume gives the bytes of one uninterrupted process.
  export NSAMPLES=12
  compress 2 "$TMP/out" opt-tiny > /dev/null 2> "$TMP/kill.err" &
  launcher=$!
  for _ in $(seq 600); do
    [ -f "$TMP/out.resume/progress.json" ] && grep -q '"layers_done": [2-5]' "$TMP/out.resume/progress.json" && break
    kill -0 "$launcher" 2> /dev/null || break
    sleep 0.1
  done
  victim=""
  # This run's rank 1: its command line names our directory, its environment its rank.
  for p in $(pgrep -x latentllm || true); do
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q "$TMP/out" || continue
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  [ -n "$victim" ] || { wait "$launcher" || true; cat "$TMP/kill.err"; fail "rank 1 not found (the run ended before the kill)"; }
  kill -9 "$victim"
  t0=$(date +%s)
  rc=0
  wait "$launcher" || rc=$?
  t1=$(date +%s)
  [ "$rc" != 0 ] || fail "the run succeeded with a killed rank"
  [ $((t1 - t0)) -le 10 ] || fail "the run took $((t1 - t0)) s to end after the kill"
  grep -q "rank 1" "$TMP/kill.err" || { cat "$TMP/kill.err"; fail "no error naming rank 1"; }
  [ -z "${SHOW_ERR:-}" ] || cat "$TMP/kill.err"
  [ -f "$TMP/out.resume/progress.json" ] || fail "the progress was not kept"
  compress 0 "$TMP/ref12" opt-tiny > /dev/null 2>&1 || fail "plain run (12 windows)"
  compress 3 "$TMP/out" opt-tiny --resume > /dev/null 2> "$TMP/resume.err" || { cat "$TMP/resume.err"; fail "resume"; }
  [ "$(digest "$TMP/out")" = "$(digest "$TMP/ref12")" ] || fail "resumed after the kill: other bytes"
  echo "rank 1 killed: ended in $((t1 - t0)) s; resumed on 3 ranks to the bytes of one process"
  ;;
*) fail "unknown case" ;;
esac
