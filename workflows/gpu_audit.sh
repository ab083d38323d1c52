#!/usr/bin/env bash
# The backend audit on a GPU machine (issue 8): every built-in workload under --backend gpu
# with its audit table, a few route variants, the user-script case (da.from_array flagged,
# s.to_backend clean), and the audit's overhead at GPU sizes. One call of a few minutes.
#
#   bash workflows/gpu_audit.sh OUTDIR            # tables on stdout; records and JSON under OUTDIR
#
# Exit 0 when every run was valid and audited clean (allowed host values by design are listed
# as "allowed", not foreign), the user script behaved as expected and the overhead ran.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out/records"
export PYTHONUNBUFFERED=1 COLUMNS=200
py=${PYTHON:-python3}
rc=0
cases=()
for w in $($py -c "from gpuscale import workloads; print(' '.join(workloads.names()))"); do
  cases+=("$w")
done
cases+=("svd --condition 1e6" "svd --route tsqr --compute-uv" "groupby --split-out 2"
        "groupby --rows 4000000 --keys 2000000")
i=0
for c in "${cases[@]}"; do
  i=$((i + 1))
  echo "=== gpuscale run $c --backend gpu --strict-backend"
  # shellcheck disable=SC2086
  $py -m gpuscale run $c --backend gpu --repeat 2 --strict-backend --json \
      --results-dir "$out/records" >"$out/run-$i.json" 2>"$out/run-$i.err"
  code=$?
  if [ $code -ne 0 ]; then rc=1; echo "exit $code: $(tail -1 "$out/run-$i.err")"; fi
  rec=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['path'])" "$out/run-$i.json" 2>/dev/null \
        || ls -t "$out"/records/*.json 2>/dev/null | head -1)
  [ -n "$rec" ] && $py -m gpuscale audit report "$rec"
done
echo "=== user script: da.from_array(numpy) in a GPU session, then s.to_backend"
$py workflows/audit_user_script.py --backend gpu --json "$out/user-script.json" || rc=1
echo "=== audit overhead at GPU sizes"
$py workflows/audit_overhead.py --backend gpu --rounds 5 --json "$out/overhead.json" || rc=1
exit $rc
