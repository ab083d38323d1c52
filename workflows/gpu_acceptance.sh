#!/usr/bin/env bash
# The GPU half, proven on a GPU machine. Each stage fits one call of a few minutes and
# leaves its tables on stdout and its logs/records under OUTDIR.
#
#   bash workflows/gpu_acceptance.sh matrix OUTDIR    # gpuscale run over tcp/ucx, 1 and 2 GPUs
#   bash workflows/gpu_acceptance.sh tests OUTDIR [TEST FILES]  # pytest -m gpu (all of tests/, or the files)
#   bash workflows/gpu_acceptance.sh compare OUTDIR   # compare_plain_dask (large)
#   bash workflows/gpu_acceptance.sh bench OUTDIR [bench_vs_peer.py args]   # default: every row this machine can run
#   bash workflows/gpu_acceptance.sh library OUTDIR   # gpuscale bench workflows/library.yaml: CPU vs GPU per workload
#   bash workflows/gpu_acceptance.sh trace OUTDIR     # svd --trace over tcp and ucx on 2 GPUs, then trace compare
#   bash workflows/gpu_acceptance.sh queries OUTDIR [rest rounds 1e8 protocol]  # the user queries on one GPU
#   bash workflows/gpu_acceptance.sh two-gpus OUTDIR [wire peer runs queries queries-1e8]  # 2 GPUs against 1
#   bash workflows/gpu_acceptance.sh engines OUTDIR [tests multi single dask]  # the engine route, TPC-H SF10
#   SF=100 bash workflows/gpu_acceptance.sh several-gpus OUTDIR [tests queries scaling]  # every GPU against one
set -uo pipefail
stage=${1:?stage: matrix | tests | compare | bench | library | trace | queries | two-gpus | engines | several-gpus}
out=${2:?output folder}
shift 2
mkdir -p "$out"
export PYTHONUNBUFFERED=1 GPUSCALE_RESULTS=/tmp/gpuscale-results
py=${PYTHON:-python3}
ngpus=$($py -c "from gpuscale import machine; print(len(machine.gpus()))")
echo "GPUs visible: $ngpus"
case "$stage" in
  matrix)
    # one `gpuscale run` process per case (start-up included), as a user types it
    svd="--rows 2000000 --cols 1000"; gb="--rows 100000000 --keys 1000000 --partitions 10"
    cases=("svd --backend gpu" "groupby --backend gpu" "svd --backend gpu $svd" "groupby --backend gpu $gb"
           "svd --backend gpu --protocol ucx $svd" "groupby --backend gpu --protocol ucx $gb"
           "svd --backend gpu --condition 1e7 --rows 400000 --cols 200"
           "svd --backend gpu --condition 1e10 --rows 400000 --cols 200"
           "svd --backend gpu --compute-uv --rows 400000 --cols 200")
    [ "$ngpus" -ge 2 ] && cases+=("svd --backend gpu --gpus 0,1 $svd" "svd --backend gpu --gpus 0,1 --protocol ucx $svd"
                                   "groupby --backend gpu --gpus 0,1 $gb" "groupby --backend gpu --gpus 0,1 --protocol ucx $gb"
                                   "svd --backend gpu --gpus 0,1 --protocol ucx --nvlink $svd")
    $py -m gpuscale info
    rc=0; i=0
    for c in "${cases[@]}"; do
      echo "=== gpuscale run $c"
      # shellcheck disable=SC2086  # $c is the case's words
      timeout 240 $py -m gpuscale run $c --results-dir "$out/records" >"$out/case$i.txt" 2>&1 \
        || { rc=1; tail -1 "$out/case$i.txt"; }
      i=$((i + 1))
    done
    $py -m gpuscale results list "$out/records"
    exit $rc ;;
  tests)
    # the whole GPU suite takes about 9 min on one H200: pass halves of tests/ to fit a call each
    [ $# -gt 0 ] || set -- tests
    $py -m pytest -m gpu -p no:cacheprovider -q -rs --durations=15 "$@" 2>&1 | tee "$out/pytest-gpu.txt"
    exit "${PIPESTATUS[0]}" ;;
  compare)
    $py workflows/compare_plain_dask.py --backend gpu --size large --rounds 5 --json "$out/compare.json" \
      2>"$out/compare.err"
    exit $? ;;
  bench)
    $py workflows/bench_vs_peer.py --rounds 3 --json "$out/bench.json" "$@" 2>"$out/bench.err"
    rc=$?; tail -5 "$out/bench.err"; exit $rc ;;
  library)
    $py -m gpuscale bench workflows/library.yaml --out "$out/bench-library"
    exit $? ;;
  trace)
    # svd (little data moves, the Gram route) and transpose_sum (all-to-all
    # blocks: the bandwidth picture), each over tcp and ucx on GPUs 0,1, then trace compare.
    rc=0
    for w in "svd --rows 2000000 --cols 1000" "transpose_sum --n 40000 --chunk 4000"; do
      name=${w%% *}
      for proto in tcp ucx; do
        rm -rf "/tmp/trace-$name-$proto"
        $py -m gpuscale run $w --backend cupy --gpus 0,1 --repeat 3 --protocol $proto \
          --trace "/tmp/trace-$name-$proto" >"$out/run-$name-$proto.txt" 2>&1 || rc=1
      done
      $py -m gpuscale trace compare "/tmp/trace-$name-tcp" "/tmp/trace-$name-ucx" || rc=1
      $py -m gpuscale trace compare "/tmp/trace-$name-tcp" "/tmp/trace-$name-ucx" --json \
        >"$out/compare-$name.json" 2>/dev/null
    done
    tar czf "$out/traces.tgz" -C /tmp $(cd /tmp && ls -d trace-*) 2>/dev/null
    exit $rc ;;
  queries)
    # The user queries on one GPU, each part resuming from OUTDIR's JSON (give every call the
    # same OUTDIR on the machine and run it under `timeout -s INT SECONDS`; exit 130 keeps the
    # cells measured): rest = H2O 1e7 and TPC-H SF10 on every side, the cells the stored H200
    # run lacks (a run of the same machine kind; its cells are kept, the others timed here);
    # rounds = the GPU session against dask-cudf on TPC-H in 4 alternating rounds; 1e8 = the
    # H2O suites at 1e8 rows on every side but the CPU session; protocol = the GPU session over
    # TCP and over UCX (the UCX on the path) against dask-cudf, H2O 1e7 and TPC-H SF10.
    [ $# -gt 0 ] || set -- rest rounds 1e8
    rc=0
    for part in "$@"; do
      case "$part" in
        rest)
          [ -f "$out/queries-1e7.json" ] \
            || cp docs/bench-h200/user-queries/h200-sf10-1e7-all-sides.json "$out/queries-1e7.json"
          $py workflows/user_queries.py --h2o-rows 1e7 --tpch-scale 10 --data /tmp/qdata --max-time 6 \
            --json "$out/queries-1e7.json" --resume "$out/queries-1e7.json" 2>"$out/queries-1e7.err" || rc=1 ;;
        rounds)
          $py workflows/user_queries.py --suites tpch --tpch-scale 10 --data /tmp/qdata \
            --sides gpuscale-gpu:gpus=1,dask-cudf:gpus=1 --rounds 4 --repeat 2 --hang-after 120 \
            --json "$out/queries-rounds.json" --resume "$out/queries-rounds.json" 2>"$out/queries-rounds.err" \
            || rc=1 ;;
        1e8)
          # the GPU sides and DuckDB first, each query warmed up once; then plain Dask on the CPU,
          # which takes minutes a query here, with no untimed warm-up (a cell records its
          # warm-ups; one run more than once keeps the median, a warm run); the CPU session is
          # left out (its rule is measured at 1e7)
          # (the cells the stored H200 run has are kept: a run of the same machine kind); plain
          # Dask's pandas answers are made when a check needs one: at 1e8 its largest answers
          # do not fit one of its workers, and a query it cannot answer needs none
          [ -f "$out/queries-1e8.json" ] \
            || cp docs/bench-h200/user-queries/h200-h2o-1e8.json "$out/queries-1e8.json"
          q=(workflows/user_queries.py --suites h2o-groupby,h2o-join --h2o-rows 1e8 --data /tmp/qdata
             --max-time 6 --hang-after 600 --json "$out/queries-1e8.json" --resume "$out/queries-1e8.json")
          $py "${q[@]}" --sides gpuscale-gpu,dask-cudf,polars-gpu,duckdb --warmup 1 2>"$out/queries-1e8.err" \
            && $py "${q[@]}" --sides gpuscale-gpu,dask-cudf,polars-gpu,duckdb,dask-cpu --warmup 0 --answers when-needed \
              2>>"$out/queries-1e8.err" || rc=1 ;;
        protocol)
          $py workflows/user_queries.py --h2o-rows 1e7 --tpch-scale 10 --data /tmp/qdata \
            --sides gpuscale-gpu,gpuscale-gpu:protocol=ucx,dask-cudf --warmup 1 --max-time 6 --hang-after 120 \
            --json "$out/queries-protocol.json" --resume "$out/queries-protocol.json" \
            2>"$out/queries-protocol.err" || rc=1 ;;
        *) echo "unknown part $part: rest, rounds, 1e8 or protocol" >&2; exit 2 ;;
      esac
    done
    exit $rc ;;
  engines)
    # The engine route on TPC-H SF10 as tpchgen-cli writes it, every part resuming from
    # OUTDIR/engines-sf10.json (run it in the background over several calls): tests = the GPU
    # tests of the route; multi = every side but plain Dask on several files per table; single =
    # the GPU session on its engine and on Dask on one file per table (the same rows: pandas'
    # answers are copied); dask = plain Dask on the CPU, one warm-up and one timed run.
    [ $# -gt 0 ] || set -- tests multi single dask
    rc=0
    j=(--json "$out/engines-sf10.json" --resume "$out/engines-sf10.json")
    q=(workflows/user_queries.py --suites tpch --tpch-scale 10 --data /tmp/qdata --max-time 4 --hang-after 300)
    for part in "$@"; do
      case "$part" in
        tests)
          $py -m pytest -m gpu -p no:cacheprovider -q -rs tests/test_engines_gpu.py tests/test_engines_gpus.py 2>&1 | tail -15 \
            | tee "$out/pytest-engines.txt" ;;
        multi)
          $py "${q[@]}" --tpch-layouts multi "${j[@]}" --reference-jobs 3 \
            --sides gpuscale-gpu,polars-gpu,polars-gpu:executor=in-memory,duckdb,polars-cpu,gpuscale-cpu,gpuscale-gpu:engine=dask \
            2>"$out/engines-multi.err" || rc=1 ;;
        single)
          mkdir -p /tmp/qdata/tpch-10-single
          cp -n /tmp/qdata/tpch-10/answer-*.parquet /tmp/qdata/tpch-10-single/ 2>/dev/null
          $py "${q[@]}" --tpch-layouts single "${j[@]}" --sides gpuscale-gpu:engine=dask,gpuscale-gpu \
            2>"$out/engines-single.err" || rc=1 ;;
        dask)
          $py "${q[@]}" --tpch-layouts multi "${j[@]}" --sides dask-cpu --repeat 1 --max-time 1 \
            2>"$out/engines-dask.err" || rc=1 ;;
        *) echo "unknown part $part: tests, multi, single or dask" >&2; exit 2 ;;
      esac
    done
    $py workflows/user_queries.py --suites tpch --tpch-scale 10 --tpch-layouts multi,single --data /tmp/qdata \
      --sides gpuscale-gpu,polars-gpu,polars-gpu:executor=in-memory,duckdb,polars-cpu,gpuscale-cpu,gpuscale-gpu:engine=dask,dask-cpu \
      --resume "$out/engines-sf10.json" --print-only > "$out/engines-tables.txt" 2>/dev/null
    cat "$out/engines-tables.txt"
    exit $rc ;;
  two-gpus)
    # GPU 0 -> 1 layer by layer against the wire; svd weak scaling 1 -> 2 GPUs and one block
    # p2p; svd and groupby at two sizes on GPU 0 against GPUs 0,1 as `gpuscale run` (one
    # process each); the user queries on one GPU against two, per protocol and shuffle method.
    # The queries resume from OUTDIR's JSON: on a machine whose calls are time-limited, give
    # every call the same OUTDIR on that machine (not a fresh output folder) and run the part under
    # `timeout -s INT SECONDS`, which ends it with its cells kept (exit 130).
    [ "$ngpus" -ge 2 ] || { echo "two-gpus needs 2 GPUs, this machine has $ngpus" >&2; exit 2; }
    # queries-1e8 = the H2O suites at 1e8 rows on GPU 0 and on GPUs 0,1, over TCP and over UCX
    # (the stored run had libucx-cu13 1.22.0 unpacked into a folder put first on PYTHONPATH).
    [ $# -gt 0 ] || set -- wire peer runs queries queries-1e8
    rc=0
    for part in "$@"; do
      case "$part" in
        wire) $py workflows/p2p_wire.py --quick --out "$out/p2p-wire.json" || rc=1 ;;
        peer) $py workflows/bench_vs_peer.py --rows p2p,scaling --rounds 3 --json "$out/peer.json" \
                2>"$out/peer.err" || rc=1 ;;
        runs)
          # each size on GPU 0 and on GPUs 0,1, groupby also with no --gpus (rule gpus.work picks),
          # the base sizes over UCX too: where a second GPU starts to pay
          svd="svd --cols 1000 --rows"; gb="groupby --keys 1000000 --rows"
          for w in "$svd 2000000" "$svd 4000000" "$gb 100000000 --partitions 10" "$gb 400000000 --partitions 40"; do
            gs=("--gpus 0" "--gpus 0,1")
            case "$w" in *" 2000000"|*" 100000000 "*) gs+=("--gpus 0,1 --protocol ucx") ;; esac
            case "$w" in groupby*) gs+=("") ;; esac  # no --gpus: the GPUs rule gpus.work picks
            for g in "${gs[@]}"; do
              echo "=== gpuscale run $w --backend gpu $g --repeat 7"
              # shellcheck disable=SC2086  # the case's words
              timeout 240 $py -m gpuscale run $w --backend gpu $g --repeat 7 --results-dir "$out/runs" \
                >"$out/run.txt" 2>&1 || { rc=1; tail -1 "$out/run.txt"; }
              grep -m1 "median / min" "$out/run.txt"
            done
          done
          $py -m gpuscale results list "$out/runs" ;;
        queries)
          # the cells the stored run has are kept (a run of the same machine kind); the rest are timed
          [ -f "$out/queries-2gpus.json" ] \
            || cp docs/bench-h200x2/user-queries/two-gpus-sf10-1e7-all-sides.json "$out/queries-2gpus.json"
          g="gpuscale-gpu:gpus=1,gpuscale-gpu:gpus=2,gpuscale-gpu:gpus=2:protocol=ucx,gpuscale-gpu:gpus=1:gather=scheduler"
          g="$g,gpuscale-gpu:gpus=2:shuffle=p2p,dask-cudf:gpus=2"
          $py workflows/user_queries.py --h2o-rows 1e7 --tpch-scale 10 --data /tmp/qdata --sides "$g" \
            --max-time 4 --hang-after 120 --json "$out/queries-2gpus.json" --resume "$out/queries-2gpus.json" 2>"$out/queries.err" || rc=1 ;;
        queries-1e8)
          g="gpuscale-gpu:gpus=1,gpuscale-gpu:gpus=1:protocol=ucx,gpuscale-gpu:gpus=2:protocol=ucx,gpuscale-gpu:gpus=2"
          $py workflows/user_queries.py --suites h2o-groupby,h2o-join --h2o-rows 1e8 --data /tmp/qdata \
            --sides "$g" --warmup 1 --max-time 6 --hang-after 300 --json "$out/queries-2gpus-1e8.json" \
            --resume "$out/queries-2gpus-1e8.json" 2>"$out/queries-2gpus-1e8.err" || rc=1 ;;
        *) echo "unknown part $part: wire, peer, runs, queries or queries-1e8" >&2; exit 2 ;;
      esac
    done
    exit $rc ;;
  several-gpus)
    # The user queries on every GPU of the machine against one, TPC-H at scale factor SF (default
    # 10) as tpchgen-cli writes it: the GPU session (its engine route, and engine=dask), cudf-polars'
    # DaskEngine used directly on the same GPUs, the session on GPU 0, DuckDB on the machine's
    # cores, Polars' GPU engine last (cudf-polars' DaskEngine does not start in a process where
    # it ran). Resumes from OUTDIR/several-gpus-sfSF.json: give every call the same OUTDIR on the
    # machine and run it under `timeout -s INT SECONDS`. scaling = svd weak scaling 1 -> N GPUs.
    [ "$ngpus" -ge 2 ] || { echo "several-gpus needs 2 GPUs or more, this machine has $ngpus" >&2; exit 2; }
    sf=${SF:-10}
    [ $# -gt 0 ] || set -- tests queries scaling
    rc=0
    for part in "$@"; do
      case "$part" in
        tests)
          $py -m pytest -m gpu -p no:cacheprovider -q -rs tests/test_engines_gpus.py 2>&1 | tail -15 \
            | tee "$out/pytest-several-gpus.txt" ;;
        queries)
          n="gpus=$ngpus"
          g="gpuscale-gpu:$n,cudf-polars-dask:$n,gpuscale-gpu:gpus=1,duckdb,gpuscale-gpu:$n:engine=dask,polars-gpu"
          $py workflows/user_queries.py --suites tpch --tpch-scale "$sf" --data /tmp/qdata --sides "$g" \
            --max-time 4 --hang-after 300 --json "$out/several-gpus-sf$sf.json" \
            --resume "$out/several-gpus-sf$sf.json" 2>"$out/several-gpus-sf$sf.err" || rc=$? ;;
        scaling)
          $py workflows/bench_vs_peer.py --rows scaling --rounds 3 --json "$out/scaling.json" \
            2>"$out/scaling.err" || rc=1 ;;
        *) echo "unknown part $part: tests, queries or scaling" >&2; exit 2 ;;
      esac
    done
    exit $rc ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
