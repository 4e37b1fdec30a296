#!/bin/bash
# never finishes within the task's verifier.timeout_sec
sleep 600
echo 1 > /logs/verifier/reward.txt
