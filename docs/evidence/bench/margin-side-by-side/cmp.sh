#!/bin/bash
# usage: cmp.sh SRC cal workload seeds...
src=$1; cal=$2; wl=$3; shift 3
for s in "$@"; do
  out=$(cd $src && PYTHONPATH=$src:/tmp/s11 nice -n 5 ~/.cache/pipetune/venv/bin/python /tmp/s11/trace.py $cal $wl $s 2>&1)
  echo "$src $cal $wl seed $s: $(echo "$out" | grep '^rate')  changes=$(echo "$out" | grep -c '^       {') breaches=$(echo "$out" | grep -c '^GUARD')"
done
