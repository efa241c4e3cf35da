#!/usr/bin/env bash
# Times one phase of `make test` and keeps the times for the summary at its end.
#   tools/phase.sh NAME COMMAND...   run COMMAND, append "NAME SECONDS STATUS" to the log
#   tools/phase.sh --report          print the phases so far, with their total
# The log is $PHASE_LOG (default build/test-phases); `make test` empties it first.
set -uo pipefail
log=${PHASE_LOG:-build/test-phases}
case "${1:-}" in
  -h|--help|"") sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --report)
    [ -s "$log" ] || exit 0
    awk '{ t += $2; printf "  %-24s %6d s  %s\n", $1, $2, $3 } END { printf "  %-24s %6d s  (%.1f min)\n", "total", t, t / 60 }' "$log"
    exit 0 ;;
esac
name=$1; shift
mkdir -p "$(dirname "$log")"
start=$(date +%s)
"$@"
rc=$?
secs=$(( $(date +%s) - start ))
status=ok; [ $rc = 0 ] || status="failed($rc)"
echo "$name $secs $status" >> "$log"
echo "phase $name: $secs s, $status" >&2
exit $rc
