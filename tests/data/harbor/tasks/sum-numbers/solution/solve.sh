#!/bin/bash
# wrong on purpose: multiplies instead of adding
echo 60 > /app/sum.txt
