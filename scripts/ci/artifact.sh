#!/usr/bin/env bash
# A shard's run roots as one CI artifact: a tar file, links stored as links.
#
#   artifact.sh pack RUN_ROOT I       writes <runs>/shard-I.tar (<runs>: RUN_ROOT's folder)
#                                     holding RUN_ROOT, every ancestor it resumed (side by
#                                     side at the top), and shard-I.latest naming RUN_ROOT
#   artifact.sh unpack FROM RUNS      every *.tar under FROM unpacked into RUNS
#   artifact.sh latest RUNS I         prints the latest run root of shard I in RUNS (or
#                                     nothing)
#
# The ancestors travel with the root because a resumed root keeps its carried units' files
# in the ancestor that scored them; unpacked side by side on another machine, the chain is
# found again by name (harness.run.manifest.related_root).
#
# Why a tar: a run root holds files the agent wrote (its workspace), and the agent is an
# adversary. actions/upload-artifact follows symbolic links, so a link the agent planted
# (to the runner's credentials, /proc/self/environ, /dev/urandom) would upload its target.
# tar stores a link as a link and never reads through it, and the agent's own folder
# (host_workspace) is left out; unpacking stages each tar alone and moves in only its own
# shard's entries, never a link (GNU tar refuses members that climb out with `..`).
set -euo pipefail
case "${1:-}" in
  pack)
    root=${2:?give the run root}; shard=${3:?give the shard index}
    [ -f "$root/run_manifest.json" ] || { echo "artifact: no run root at $root: nothing to pack"; exit 0; }
    # absolute: GNU tar resolves a relative -C against the previous -C
    runs=$(cd "$(dirname "$root")" && pwd -P); name=$(basename "$root"); root=$runs/$name
    # the root, then every ancestor the run model names (harness.run.locate.run_roots:
    # where it was recorded, else beside it), each at the top
    members=(-C "$runs" "$name")
    while IFS=$'\t' read -r dir base; do
      [ -n "$base" ] && members+=(-C "$dir" "$base")
    done < <(python3 -c 'import sys
from pathlib import Path
from harness.run.locate import run_roots
root = Path(sys.argv[1]).resolve()
for found in run_roots(root).values():
    if found.resolve() != root:
        print(found.resolve().parent, found.name, sep="\t")' "$root")
    printf '%s\n' "$name" > "$runs/shard-$shard.latest"
    # the agent's own folder stays behind (links, FIFOs, sparse terabytes, trees deeper
    # than PATH_MAX, files it keeps changing): nothing after the run reads it
    # (exit 1 is "a file changed as we read it": the archive is whole, so it stands)
    rc=0
    tar -cf "$runs/shard-$shard.tar" --exclude=host_workspace \
      -C "$runs" "shard-$shard.latest" "${members[@]}" || rc=$?
    [ "$rc" -le 1 ] || exit "$rc"
    echo "artifact: packed $name and its ancestors into $runs/shard-$shard.tar";;
  unpack)
    from=${2:?give the downloaded folder}; into=${3:?give the runs folder}
    mkdir -p "$into"
    found=0
    while IFS= read -r -d '' t; do
      # each tar alone in a folder of its own, then its top-level entries moved in whole: no
      # tar writes through a link another tar made; a tar of shard I brings only shard I's
      # names (shard-I.latest, shard-I-*): one shard's artifact never replaces another's
      i=$(basename "$t" .tar); i=${i#shard-}
      stage=$(mktemp -d "$into/.unpack.XXXXXX")
      tar -xf "$t" -C "$stage" --no-same-owner --no-same-permissions
      for entry in "$stage"/*; do
        [ -e "$entry" ] || [ -L "$entry" ] || continue
        base=${entry##*/}
        case "$base" in
          "shard-$i.latest"|"shard-$i-"*) ;;
          shard-*) echo "artifact: $t: $base is not shard $i's: skipped" >&2; continue;;
        esac
        if [ -L "$entry" ]; then echo "artifact: $t: $base is a link: skipped" >&2; continue; fi
        rm -rf -- "${into:?}/$base"
        mv -- "$entry" "$into/$base"
      done
      rm -rf -- "$stage"
      found=$((found + 1))
    done < <(find "$from" -name '*.tar' -type f -print0 2>/dev/null | sort -z)
    echo "artifact: unpacked $found artifact(s) into $into";;
  latest)
    runs=${2:?give the runs folder}; shard=${3:?give the shard index}
    marker="$runs/shard-$shard.latest"
    [ -f "$marker" ] || exit 0
    name=$(head -n 1 "$marker")
    case "$name" in ''|*/*|.*) echo "artifact: $marker names no run root" >&2; exit 2;; esac
    [ -f "$runs/$name/run_manifest.json" ] && printf '%s\n' "$runs/$name";;
  *) echo "usage: artifact.sh pack RUN_ROOT I | unpack FROM RUNS | latest RUNS I" >&2; exit 2;;
esac
