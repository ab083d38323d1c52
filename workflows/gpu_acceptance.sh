#!/usr/bin/env bash
# The GPU half, proven on a GPU machine. Each stage fits one call of a few minutes and
# leaves its tables on stdout and its logs/records under OUTDIR.
#
#   bash workflows/gpu_acceptance.sh matrix OUTDIR    # gpuscale run over tcp/ucx, 1 and 2 GPUs
#   bash workflows/gpu_acceptance.sh tests OUTDIR     # pytest -m gpu + compare_plain_dask (large)
#   bash workflows/gpu_acceptance.sh bench OUTDIR     # bench_vs_peer.py, every row this machine can run
#   bash workflows/gpu_acceptance.sh library OUTDIR   # every workload on --backend gpu and cpu
set -uo pipefail
stage=${1:?stage: matrix | tests | bench | library}
out=${2:?output folder}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 GPUSCALE_RESULTS=/tmp/gpuscale-results
py=${PYTHON:-python3}
ngpus=$($py -c "from gpuscale import machine; print(len(machine.gpus()))")
echo "GPUs visible: $ngpus"
case "$stage" in
  matrix)
    presets="--preset gpu-1"
    [ "$ngpus" -ge 2 ] && presets="$presets --preset gpu-2"
    $py -m gpuscale info
    $py workflows/run_matrix.py $presets --logs /tmp/matrix-logs --json "$out/matrix.json" --timeout 240
    rc=$?
    tar czf "$out/matrix-logs.tgz" -C /tmp matrix-logs gpuscale-results 2>/dev/null
    exit $rc ;;
  tests)
    $py -m pytest -m gpu -p no:cacheprovider -q -rs tests 2>&1 | tee "$out/pytest-gpu.txt"
    rc=${PIPESTATUS[0]}
    $py workflows/compare_plain_dask.py --backend gpu --size large --rounds 5 --json "$out/compare.json" \
      2>"$out/compare.err"
    exit $(( rc || $? )) ;;
  bench)
    $py workflows/bench_vs_peer.py --rounds 3 --json "$out/bench.json" 2>"$out/bench.err"
    rc=$?; tail -5 "$out/bench.err"; exit $rc ;;
  library)
    cases=()
    for w in $($py -c "from gpuscale import workloads; print(' '.join(n for n in workloads.names() if n not in ('svd', 'groupby')))"); do
      cases+=("$w --backend gpu" "$w --backend cpu")
    done
    $py workflows/run_matrix.py "${cases[@]}" --logs /tmp/library-logs --json "$out/library.json" --timeout 240
    rc=$?
    tar czf "$out/library-logs.tgz" -C /tmp library-logs 2>/dev/null
    exit $rc ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
