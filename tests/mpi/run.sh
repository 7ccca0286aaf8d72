#!/usr/bin/env bash
# The CLI under mpirun on the fixtures (ctest label `mpi`, tests/CMakeLists.txt): checkpoints,
# perplexities and ScienceQA results byte-identical to one plain process for K = 2 and 3 ranks (and the
# compressor's for one process of 2 threads and 2 ranks of 2 threads: the task graph's thread slots), a resume
# with another K, a killed rank, a failing rank during eval, the commands rank 0 runs alone. Small calibration sets (6 windows of 64 tokens in batches of 2: 3 batches, one per rank
# at K = 3) keep each case to seconds. In the identical case joint up-down runs in units of 96 tokens
# (4 units: 2 + 2 at K = 2, 1 + 1 + 2 at K = 3), so its token passes are split across the ranks.
#
# Usage: tests/mpi/run.sh CASE CLI SHARED
#   CASE: identical | resume | killed | eval | eval-fault | commands
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
  local ratio=(--ratio 0.3)
  [[ " $* " == *" --bpw "* ]] && ratio=()  # a budget in bits per weight replaces the ratio
  ranks "$k" compress --model "$SHARED/models/$model" --out "$out" "${ratio[@]}" --calib c4 --calib-data "$C4" \
    --nsamples "${NSAMPLES:-6}" --seqlen 64 --batch 2 --seed 0 --dtype f32 --threads "${THREADS:-1}" "$@"
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
  # --joint qk,vo the joint V-O group is a job of its own. The sparse methods (lowrank-sparse too): one job per
  # module. --bpw: each module's rank and bits from one budget, full-rank modules quantized as one matrix.
  # --joint qkv: one task for q/k/v, three finishing tasks sharing its A; --split-heads: per-head local fits.
  for v in "opt-tiny|--ud-min-tokens-per-ffn 0 --ud-unit-tokens 96" "opt-tiny|--preset paper --ud-unit-tokens 96" \
           "stories260K/hf|--fit compensate --ud-min-tokens-per-ffn 0 --ud-unit-tokens 96" \
           "stories260K/hf|--method asvd-rootcov" "opt-tiny|--method asvd-rootcov --lambda 0" \
           "TinyStories-656K|--joint qk,vo" "TinyStories-656K|--method sparse" "opt-tiny|--method sparse" "TinyStories-656K|--method sparse --solver fista --sparse-iters 10" \
           "TinyStories-656K|--method sparsegpt" "TinyStories-656K|--method lowrank-sparse --sparse-iters 20" \
           "stories260K/hf|--bpw 3.5 --group 32 --ud-min-tokens-per-ffn 0 --ud-unit-tokens 96" \
           "TinyStories-656K|--joint qkv,ud --ud-min-tokens-per-ffn 0 --ud-unit-tokens 96" \
           "stories260K/hf|--joint none --split-heads"; do
    model=${v%%|*}
    rm -rf "$TMP"/k? "$TMP"/c?x? "$TMP"/t2
    read -r -a args <<< "${v#*|}"
    compress 0 "$TMP/k0" "$model" "${args[@]}" > /dev/null 2> "$TMP/k0.err" || { cat "$TMP/k0.err"; fail "plain run"; }
    want=$(digest "$TMP/k0")
    # latentllm's runs must exercise joint up-down's split passes (asvd-rootcov has none).
    [[ " ${args[*]} " == *" --method "* || " ${args[*]} " == *" --joint "* ]] ||
      grep -q "MLP output loss" "$TMP/k0.err" || fail "$model ${args[*]}: joint up-down did not run"
    # One process of 2 threads (the graph's thread slots), then ranks x threads.
    THREADS=2 compress 0 "$TMP/t2" "$model" "${args[@]}" > /dev/null 2> "$TMP/t2.err" ||
      { cat "$TMP/t2.err"; fail "$model ${args[*]}: 2 threads failed"; }
    [ "$(digest "$TMP/t2")" = "$want" ] || fail "$model ${args[*]}: 2 threads wrote $(digest "$TMP/t2"), 1 thread $want"
    for c in 2x1 3x1 2x2; do
      k=${c%x*}
      THREADS=${c#*x} compress "$k" "$TMP/c$c" "$model" "${args[@]}" --json > "$TMP/c$c.json" 2> "$TMP/c$c.err" ||
        { cat "$TMP/c$c.err"; fail "$model ${args[*]}: $c failed"; }
      got=$(digest "$TMP/c$c")
      [ "$got" = "$want" ] || fail "$model ${args[*]}: $c (ranks x threads) wrote $got, one process $want"
      [ "$(grep -c 'numerics \[' "$TMP/c$c.err")" = "$(grep -c 'numerics \[' "$TMP/k0.err")" ] ||
        fail "$model ${args[*]}: $k ranks logged other numerical notes than one process"
      grep -q "\"processes\": $k" "$TMP/c$c.json" || fail "$model ${args[*]}: --json without \"processes\": $k"
      # latentllm: joint Q-K's eigenproblems ran on every rank (its starts are 4 jobs of equal cost), so
      # the joint group's results really came from other ranks.
      # (Not with --joint qkv or none, where no joint Q-K runs.)
      if [[ " ${args[*]} " != *" --method "* && " ${args[*]} " != *" --joint qkv"* && " ${args[*]} " != *" --joint none "* ]]; then
        owners=$(job_ranks "$TMP/c$c.json" joint-qk)
        [ "$owners" = "$(seq -s ' ' 0 $((k - 1)))" ] ||
          fail "$model ${args[*]}: joint Q-K's jobs ran on ranks '$owners' of $k"
        # Junction forms and output errors off the critical path: deferred jobs (filling idle ranks or
        # at the layer's end) and a local v_proj's right after its fit beside joint Q-K's iterations; the
        # bytes above are one process's all the same.
        grep -q ': junction form"' "$TMP/c$c.json" || fail "$model ${args[*]}: no deferred junction form on $k ranks"
        [[ " ${args[*]} " == *" --joint "* ]] || grep -q '"after": "[^"]*v_proj"' "$TMP/c$c.json" ||
          fail "$model ${args[*]}: v_proj's junction form did not run with its fit on $k ranks"
      fi
      grep -q "ranks: $k processes" "$TMP/c$c.err" || fail "$model ${args[*]}: no ranks header on stderr"
    done
    echo "$model ${args[*]}: $want for 1 x 1, 1 x 2, 2 x 1, 3 x 1 and 2 x 2 ranks x threads ($(grep -c 'numerics \[' "$TMP/k0.err") numerical notes)"
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
eval)
  # ScienceQA on llava-shapes-tiny: each rank answers a contiguous share of the problems, the outcomes
  # are gathered in rank order; the --json (timings and "processes" aside) is byte-identical for 1, 2 and 3
  # ranks (and 2 threads each), and the accuracy is REFERENCE.json's. Progress comes from rank 0 alone, counting the whole.
  LLAVA=$SHARED/models/llava-shapes-tiny SQA=$SHARED/data/scienceqa-shapes
  strip_timing() { sed -E 's/"eval_seconds":[^,]*,//; s/"problems_per_s":[^,]*,//; s/"processes":[0-9]+,//' "$1"; }
  accuracy() { grep -o '"accuracy_percent":{[^}]*}' "$1" | grep -o '"AVG":[0-9.]*' | cut -d: -f2; }
  for v in "generate|" "loglik|--max-problems 40" "llava|--max-problems 40"; do
    protocol=${v%%|*}
    read -r -a args <<< "${v#*|}"
    for k in 0 2 3; do
      ranks "$k" eval --model "$LLAVA" --data "$SQA" --protocol "$protocol" --threads 1 --json "${args[@]}" \
        > "$TMP/eval$k.json" 2> "$TMP/eval$k.err" || { cat "$TMP/eval$k.err"; fail "$protocol: $k ranks failed"; }
    done
    n=$(grep -o '"problem_count":[0-9]*' "$TMP/eval0.json" | cut -d: -f2)
    for k in 2 3; do
      cmp -s <(strip_timing "$TMP/eval0.json") <(strip_timing "$TMP/eval$k.json") ||
        fail "$protocol: $k ranks printed another result than one process"
      grep -q "\"processes\":$k" "$TMP/eval$k.json" || fail "$protocol: --json without \"processes\": $k"
      [ "$(grep -c '^eval: scienceqa' "$TMP/eval$k.err")" = 1 ] || fail "$protocol: $k ranks printed the header more than once"
      grep -q "^eval: $n/$n problems" "$TMP/eval$k.err" || { cat "$TMP/eval$k.err"; fail "$protocol: no final progress $n/$n"; }
    done
    echo "eval $protocol: $n problems, accuracy $(accuracy "$TMP/eval0.json") % for 1, 2 and 3 ranks"
    [ "$protocol" = generate ] || continue
    # Threads change nothing either: 2 ranks x 2 threads against one process x 1 thread.
    ranks 2 eval --model "$LLAVA" --data "$SQA" --protocol generate --threads 2 --json > "$TMP/eval2t2.json" 2> /dev/null ||
      fail "generate: 2 ranks x 2 threads failed"
    cmp -s <(strip_timing "$TMP/eval0.json") <(strip_timing "$TMP/eval2t2.json") ||
      fail "generate: 2 ranks x 2 threads printed another result than one process"
    # The whole val split by LLaVA's protocol: REFERENCE.json's greedy accuracy.
    want=$(tr -d ' \n' < "$LLAVA/REFERENCE.json" | grep -o '"greedy_accuracy":{"all":[0-9.]*' | cut -d: -f3)
    got=$(accuracy "$TMP/eval3.json")
    [ -n "$want" ] && awk -v a="$got" -v b="$want" 'BEGIN { exit !(a - b < 0.005 && b - a < 0.005) }' ||
      fail "accuracy on 3 ranks $got % (expected REFERENCE.json's $want %)"
  done
  ;;
eval-fault)
  # An image that fails to decode in one rank's share only (problem 7 of 9: rank 2 of 3, rank 1 of 2)
  # ends the run on every rank within seconds with one error naming the rank and the file; the others
  # say they were stopped (at start-up or at their problem), and nothing is printed on stdout.
  SQA=$(cd "$SHARED/data/scienceqa-shapes" && pwd)
  DATA=$TMP/sqa
  mkdir -p "$DATA/images/val"
  ln -s "$SQA/problems.json" "$DATA/problems.json"
  list=""
  for p in 500001 500002 500003 500004 500005 500006 500007 500008 500009; do
    list="$list${list:+, }\"$p\""
    [ ! -d "$SQA/images/val/$p" ] || ln -s "$SQA/images/val/$p" "$DATA/images/val/$p"
  done
  echo "{\"val\": [$list]}" > "$DATA/pid_splits.json"
  [ -L "$DATA/images/val/500007" ] || fail "problem 500007 has no image to break"
  rm "$DATA/images/val/500007"
  mkdir "$DATA/images/val/500007"
  echo "not an image" > "$DATA/images/val/500007/image.png"
  for v in "2|1" "3|2"; do
    k=${v%%|*} bad=${v#*|}
    t0=$(date +%s)
    rc=0
    ranks "$k" eval --model "$SHARED/models/llava-shapes-tiny" --data "$DATA" --threads 1 > "$TMP/out" 2> "$TMP/err" || rc=$?
    t1=$(date +%s)
    [ "$rc" != 0 ] || fail "$k ranks: the run succeeded with a broken image"
    [ $((t1 - t0)) -le 10 ] || fail "$k ranks: the run took $((t1 - t0)) s to end"
    [ ! -s "$TMP/out" ] || fail "$k ranks: printed a result: $(cat "$TMP/out")"
    errors=$(grep '^latentllm: error: ' "$TMP/err" | grep -v 'stopped by the MPI launcher' || true)
    [ "$(printf '%s\n' "$errors" | grep -c .)" = 1 ] || { cat "$TMP/err"; fail "$k ranks: not one error"; }
    [[ "$errors" == *"rank $bad of $k: $DATA/images/val/500007/image.png: unknown image format"* ]] ||
      { cat "$TMP/err"; fail "$k ranks: the error does not name rank $bad and the image"; }
    # A stopped rank names what it was doing (its start-up or its problem) and advises no --resume.
    ! grep 'stopped by the MPI launcher' "$TMP/err" | grep -q -e '--resume' -e 'progress directory' ||
      { cat "$TMP/err"; fail "$k ranks: a stopped rank advises a resume eval does not have"; }
    echo "$k ranks: $errors (ended in $((t1 - t0)) s)"
  done
  ;;
commands)
  # sweep: compressions, perplexities and ScienceQA split across the ranks, rank 0 writes the files: the
  # same results (timings and memory aside) and tables as one process. generate, inspect and export run
  # on rank 0 alone while the others wait: their output once, as one process prints or writes it.
  LLAVA=$SHARED/models/llava-shapes-tiny SQA=$SHARED/data/scienceqa-shapes
  results() { grep -v -E '"(compress_seconds|eval_seconds|peak_rss_bytes)"' "$1/results.json"; }
  for k in 0 2; do
    ranks "$k" sweep --model "$LLAVA" --methods plain-svd,latentllm --ratios 0.3 --calib scienceqa --nsamples 16 \
      --calib-data "$SQA" --scienceqa "$SQA" --protocol loglik --max-problems 60 --threads 1 -q --out "$TMP/sweep$k" \
      > /dev/null 2> "$TMP/sweep$k.err" || { cat "$TMP/sweep$k.err"; fail "sweep: $k ranks failed"; }
  done
  cmp -s <(results "$TMP/sweep0") <(results "$TMP/sweep2") || fail "sweep: 2 ranks wrote other results than one process"
  cmp -s "$TMP/sweep0/table4.md" "$TMP/sweep2/table4.md" || fail "sweep: 2 ranks wrote another table4.md"
  echo "sweep: the same results.json and table4.md for 1 and 2 ranks"
  compress 0 "$TMP/latent" opt-tiny > /dev/null 2>&1 || fail "plain compress"
  for k in 0 2; do
    ranks "$k" generate --model "$TMP/latent" --prompt "Hello" --max-new-tokens 8 --threads 1 > "$TMP/gen$k" \
      2> "$TMP/gen$k.err" || { cat "$TMP/gen$k.err"; fail "generate: $k ranks failed"; }
    ranks "$k" inspect "$TMP/latent" > "$TMP/inspect$k" 2> /dev/null || fail "inspect: $k ranks failed"
    ranks "$k" export --model "$TMP/latent" --out "$TMP/hf$k" --threads 1 > /dev/null 2> "$TMP/export$k.err" ||
      { cat "$TMP/export$k.err"; fail "export: $k ranks failed"; }
  done
  [ -s "$TMP/gen0" ] || fail "generate: no text"
  cmp -s "$TMP/gen0" "$TMP/gen2" || fail "generate: 2 ranks printed '$(cat "$TMP/gen2")', one process '$(cat "$TMP/gen0")'"
  grep -q "generate runs on rank 0 alone" "$TMP/gen2.err" || fail "generate: stderr does not say rank 0 runs it"
  cmp -s "$TMP/inspect0" "$TMP/inspect2" || fail "inspect: 2 ranks printed another description"
  cmp -s "$TMP/hf0/model.safetensors" "$TMP/hf2/model.safetensors" || fail "export: 2 ranks wrote other bytes"
  echo "generate, inspect, export: rank 0 alone, the output of one process"
  ;;
*) fail "unknown case" ;;
esac
