#!/usr/bin/env bash
# The issue's commands against a tree from before the #15 work, where the test cannot run there
# (the API it calls did not exist) or stops at the first refusal. Usage:
#   git worktree add --detach /tmp/old 4a53560 && bash before_cli.sh /tmp/old > before_cli.log 2>&1
# Works in a scratch directory; edits only files under the scratch dir and the throwaway worktree's conf/.
set -u
OLD=$1; export PYTHONPATH=$OLD; S=$(mktemp -d); cd "$S"
py() { timeout "${T:-120}" python3 "$@"; echo "exit $?"; }
echo "== tree: $(git -C "$OLD" log -1 --format='%h %s' | cut -c1-80)"

echo; echo "== 1. git option injection: a=git:--output=victim.txt truncates the file"
echo keep > victim.txt
py -m kselect.selector.diff "a=git:--output=$S/victim.txt" matrix=smoke repo=$OLD 2>&1 | tail -2
echo "victim.txt now $(stat -c %s victim.txt) bytes"

echo; echo "== 2. Hydra callbacks from an overlay: kselect sweep instantiates builtins.open(VICTIM, 'w')"
echo keep > victim2.txt
printf '# @package _global_\noverlays: {evil: x}\nhydra:\n  callbacks:\n    x: {_target_: builtins.open, file: %s, mode: w}\n' "$S/victim2.txt" > $OLD/conf/overlay/evil.yaml
py -m kselect.selector.sweep -m platform=cpu 'overlay=[evil]' 2>&1 | tail -2
echo "victim2.txt now $(stat -c %s victim2.txt) bytes"
rm -f $OLD/conf/overlay/evil.yaml

echo; echo "== 3. \${oc.env:...} in an overlay's rule reason prints the environment"
printf '# @package _global_\noverlays: {leak: x}\nrules:\n  leak.w:\n    stage: warning\n    when: {}\n    reason: "token ${oc.env:KSELECT_TEST_SECRET}"\n' > $OLD/conf/overlay/leak.yaml
KSELECT_TEST_SECRET=hunter2 py -m kselect.selector platform=sm90 'overlay=[leak]' output=json 2>&1 | grep -o 'token hunter2' | head -1
rm -f $OLD/conf/overlay/leak.yaml

echo; echo "== 4. the tests' alias bomb (9 levels of 9 aliases) as a matrix file (limits: 2 GiB address space, 60 s)"
python3 -c "print('a: &a [x,x,x,x,x,x,x,x,x]'); [print(f'{c}: &{c} [' + ','.join(['*'+p]*9) + ']') for p, c in zip('abcdefgh', 'bcdefghi')]" > bomb.yaml
echo "bomb.yaml: $(stat -c %s bomb.yaml) bytes"
(ulimit -v 2097152; T=60 py -m kselect.selector.matrix matrix=$S/bomb.yaml format=ids 2>&1 | tail -1)

echo; echo "== 5. re-running conformance over the committed 135-claim file keeps only the new claims"
cp $OLD/conf/conformance/nvidia_h200.yaml h200.yaml
echo "claims before: $(grep -c 'status:' h200.yaml)"
py -m kselect.kernels.conformance --claims TORCH_REFERENCE:bf16:d64:causal,TORCH_REFERENCE:bf16:d64:window,TORCH_REFERENCE:bf16:d128:causal --gpu-name nvidia_h200 --device cpu --out h200.yaml 2>&1 | tail -1
echo "claims after: $(grep -c 'status:' h200.yaml)"

echo; echo "== 6. a forged conformance file outside conf/ via platform.gpu_model=../..: read as measured data"
sed 's/status: refuted/status: verified/' $OLD/conf/conformance/nvidia_h200.yaml > forged.yaml
rel=$(python3 -c "import os;print(os.path.relpath('$S/forged', '$OLD/conf/conformance'))")
count() { python3 -c "import sys,json; t=sys.stdin.read(); print(t.count('\"status\": \"verified\"'), 'claim checks verified,', t.count('\"status\": \"refuted\"'), 'refuted') if t.lstrip().startswith('{') else print(t[-300:])"; }
echo "committed file:   $(python3 -m kselect.selector platform=sm90 model=gemma4_31b kv_cache=fp8 'overlay=[pr48666]' output=json 2>&1 | count)"
echo "forged (../..):   $(python3 -m kselect.selector platform=sm90 model=gemma4_31b kv_cache=fp8 'overlay=[pr48666]' "platform.gpu_model=$rel" output=json 2>&1 | count)"

echo; echo "== 7. overlay=[pr48666,pr52987,pr48666] is accepted (exit 0) and reports a shorter set"
py -m kselect.selector platform=sm90 model=gemma4_31b kv_cache=fp8 model.multimodal=true 'overlay=[pr48666,pr52987,pr48666]' > sel.txt 2>&1
grep -m1 overlays sel.txt; grep -m1 "^exit" sel.txt; grep -c FLASH_ATTN sel.txt | sed 's/^/groups on FLASH_ATTN: /'
echo "the reported set alone, overlay=[pr48666,pr52987]:"
py -m kselect.selector platform=sm90 model=gemma4_31b kv_cache=fp8 model.multimodal=true 'overlay=[pr48666,pr52987]' > sel2.txt 2>&1
grep -c FLASH_ATTN sel2.txt | sed 's/^/groups on FLASH_ATTN: /'; grep -m1 -o "TRITON_ATTN" sel2.txt
rm -rf "$S"
