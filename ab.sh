#!/bin/bash
# ab.sh rounds sessions rate rw lun(r) lun(tgt) seconds
rounds=$1; n=$2; rate=$3; rw=$4; lr=$5; lt=$6; s=${7:-4}
for i in $(seq 1 $rounds); do
  for t in tgt base new; do
    case $t in
      tgt) url=iscsi://127.0.0.1:3261/iqn.2026-12.test:tgt/$lt; pid=$(cat /tmp/exp/tgtd.pid);;
      base) url=iscsi://127.0.0.1:3263/iqn.2026-12.test:r/$lr; pid=$(cat /tmp/exp/rb.pid);;
      new) url=iscsi://127.0.0.1:3262/iqn.2026-12.test:r/$lr; pid=$(cat /tmp/exp/r.pid);;
    esac
    out=$(/work/main/target/release/rustgt bench load --sessions $n --rate $rate --seconds $s --rw $rw --pid $pid --json $url 2>&1)
    echo "$t $(echo "$out" | python3 -c '
import json,sys
d=json.load(sys.stdin)
p=d["processes"][0] if "processes" in d else d["pids"][0]
print(round(p.get("cpu_us_per_io",0),2), d["latency_us"]["p50"] if "latency_us" in d else "", d["latency_us"]["p99"] if "latency_us" in d else "")' 2>/dev/null || echo "$out" | head -c 300)"
  done
done
