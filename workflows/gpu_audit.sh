#!/usr/bin/env bash
# The backend audit on a GPU machine: every built-in workload under --backend gpu
# on one cluster with its audit (workflows/audit_workloads.py), a few route variants, one CLI
# run with --strict-backend and its `audit report`, and the audit's overhead at GPU sizes. One call
# of a few minutes (tests/test_audit.py holds the user-script case: da.from_array flagged,
# s.to_backend clean).
#
#   GPUS=0,1 bash workflows/gpu_audit.sh OUTDIR   # tables on stdout; records and JSON under OUTDIR
#
# Exit 0 when every run was valid and audited clean (allowed host values by design are listed
# as "allowed", not foreign) and the overhead ran.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out/records"
export PYTHONUNBUFFERED=1 COLUMNS=200
py=${PYTHON:-python3}
rc=0
echo "=== every workload on one cluster (GPUs ${GPUS:-all}), each audited"
$py workflows/audit_workloads.py --backend gpu ${GPUS:+--gpus $GPUS} --results-dir "$out/records" \
  --json "$out/workloads.json" 2>"$out/workloads.err" || rc=1
echo "=== the CLI way: gpuscale run svd --backend gpu --strict-backend, then audit report"
$py -m gpuscale run svd --backend gpu ${GPUS:+--gpus $GPUS} --repeat 2 --strict-backend --json \
    --results-dir "$out/records" >"$out/cli-svd.json" 2>"$out/cli-svd.err" || { rc=1; tail -1 "$out/cli-svd.err"; }
rec=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['path'])" "$out/cli-svd.json" 2>/dev/null)
[ -n "$rec" ] && $py -m gpuscale audit report "$rec"
echo "=== audit overhead at GPU sizes"
$py workflows/audit_overhead.py --backend gpu --rounds 5 --json "$out/overhead.json" || rc=1
exit $rc
