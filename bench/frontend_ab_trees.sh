#!/bin/sh
# The Voxtral front end's CPU per stream, in process: an older tree (a git revision) next to this one, in the
# order old new new old new old old new (two 20 s runs per turn; bench/frontend_inproc.py on each tree's code).
#   bench/frontend_ab_trees.sh REV MODEL_DIR [N]      e.g.  bench/frontend_ab_trees.sh 6999be0 /tmp/tiny
set -eu
rev=$1 model=$2 n=${3:-4}
here=$(cd "$(dirname "$0")/.." && pwd)
old=$(mktemp -d /tmp/voxgate-ab-XXXXXX)
git -C "$here" worktree add -q --detach "$old" "$rev"
trap 'git -C "$here" worktree remove --force "$old"' EXIT
for turn in old new new old new old old new; do
  if [ "$turn" = old ]; then tree=$old; else tree=$here; fi
  echo "== $turn $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  (cd "$tree" && "$here/.venv/bin/python" bench/frontend_inproc.py --model "$model" --variant detokenizer=own \
     --repeats 1 -n "$n" --seconds 20 2>/dev/null | grep '"variant"')
done
