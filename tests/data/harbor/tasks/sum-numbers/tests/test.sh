#!/bin/bash
if [ "$(cat /app/sum.txt 2>/dev/null)" = "12" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
