#!/bin/bash
# one point per expected file, as a fraction of EXPECTED
found=0
for f in a b c d; do [ -f "/data/$f.txt" ] && found=$((found + 1)); done
python3 -c "import json,sys; json.dump({'reward': $found / $EXPECTED, 'files': $found}, open('/logs/verifier/reward.json', 'w'))"
