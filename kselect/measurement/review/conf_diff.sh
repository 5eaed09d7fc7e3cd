#!/usr/bin/env bash
# The review recipe for a change to conf/: the matrix diff of the change against its base, as
# Markdown, published where a reviewer reads it.
#
#   kselect/measurement/review/conf_diff.sh [BASE] [extra kselect diff overrides...]
#
# BASE: a git revision, the first argument unless it is an override (default: origin/$GITHUB_BASE_REF in a GitHub pull request, else HEAD, i.e.
# the uncommitted/staged change, which is what a pre-commit hook sees). Runs the review check
#   kselect diff a.conf=git:<merge-base of BASE and HEAD> review=true check=true format=markdown repo=<this repository>
# (one diff per rules option the changed conf/ files reach - each release over the Gemma-4 `default` and the
# `models` matrices, the seed story over `seed` with each overlay set it declares; selector/review/touched.py)
# in the repository that holds the working directory, prints the Markdown, appends it to
# $GITHUB_STEP_SUMMARY when set (the job summary, ready to paste into the PR) and exits with the
# diff's status: 0 nothing moved, 1 some cell changed (or became invalid), 2 a bad config.
set -uo pipefail

repo=$(git rev-parse --show-toplevel) || { echo "conf_diff: not inside a git repository" >&2; exit 2; }
base=
if [ $# -gt 0 ] && [[ "$1" != *=* ]]; then base=$1; shift; fi
if [ -z "$base" ]; then
  if [ -n "${GITHUB_BASE_REF:-}" ]; then base="origin/$GITHUB_BASE_REF"; else base=HEAD; fi
fi
# a fresh clone has no local branch but the one checked out: `main` then means origin/main
if ! git -C "$repo" rev-parse --verify -q "$base^{commit}" >/dev/null \
   && git -C "$repo" rev-parse --verify -q "origin/$base^{commit}" >/dev/null; then base="origin/$base"; fi
rev=$(git -C "$repo" merge-base "$base" HEAD 2>/dev/null || git -C "$repo" rev-parse --verify "$base^{commit}" 2>/dev/null) || {
  echo "conf_diff: base revision '$base' not found in $repo" >&2; exit 2; }
kselect_cmd=${KSELECT:-kselect}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
$kselect_cmd diff "a.conf=git:$rev" review=true check=true format=markdown "repo=$repo" "$@" >"$out"
status=$?
cat "$out"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -s "$out" ]; then
  { echo "### kselect: what this conf/ change does (base ${base} = ${rev:0:12})"; echo; cat "$out"; echo; } >>"$GITHUB_STEP_SUMMARY"
fi
exit $status
