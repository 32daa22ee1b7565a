#!/bin/sh
# The batch feed alone, two cellar-bench builds alternating (issue 46): bench/work/stream-compare/bin/cellar-bench-{old,new}
# as bench/stream-compare.sh left them; prints each run's feed record (docs/s, put seconds, flushes).
B=${BIN:-bench/work/stream-compare/bin}
for r in 1 2 3 4; do for side in old new; do
  $B/cellar-bench-$side stream --scale 0.1 --queries 1 --no-global --work /tmp/feedab-work --out /tmp/feedab-$side-$r >/dev/null 2>&1
  python3 -c "
import json,sys
d=json.load(open('/tmp/feedab-$side-$r/stream-bench.json'))
f=d.get('feed') or d
print('$side', $r, json.dumps(f)[:400])
"
done; done
