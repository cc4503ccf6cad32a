#!/usr/bin/env bash
# Waits up to $1 seconds (default 560; 0 after a foreground final.sh) for final.sh to finish, then packs
# what it has written so far ($WORK without the registry) into $OUT/final.tar.gz and shows the log's tail.
WAIT_S=${1:-560}
WORK=${WORK:-/tmp/tdwork}
OUT=${OUT:-/tmp/out}
LOG=${LOG:-/tmp/final.log}
end=$(( $(date +%s) + WAIT_S ))
while [ ! -e "$WORK/DONE" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
mkdir -p "$OUT"
tar -czf "$OUT/final.tar.gz" -C "$WORK" --exclude=registry . 2>/dev/null
cp "$LOG" "$OUT/final.log" 2>/dev/null
[ -f "$LOG" ] && tail -40 "$LOG"
[ -e "$WORK/DONE" ] && echo "final.sh: finished" || echo "final.sh: still running"
