#!/bin/sh
# demo.sh BINDIR — the agent end to end, in well under a minute:
#   1. generate a tiny DS4-layout model with random weights (with DeepSeek's
#      own vocabulary when npm can provide it, else a 311-token one: with it
#      the system prompt is ~3 times as many tokens to read on the CPU);
#   2. run `ds4cl -p` on it with the real CPU engine (random weights: the
#      words are meaningless, the point is the whole path running);
#   3. replay a scripted session (the script engine) in which the agent
#      reads a file, edits it and runs it with the real tools in a sample
#      workspace, and show the result.
set -eu
bin=$(cd "${1:-.}" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ds4cl-demo.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
# the demo's sessions go away with it, out of the user's list (caches,
# such as the vocabulary fetched once from npm, stay where they are)
export XDG_DATA_HOME="$tmp/data"

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then bold=$(printf '\033[1m'); dim=$(printf '\033[2m'); off=$(printf '\033[0m')
else bold=; dim=; off=; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$off"; }
note() { printf '%s%s%s\n' "$dim" "$*" "$off"; }
show() { printf '%s$ %s%s\n' "$dim" "$*" "$off"; }

step "1. A tiny model (6 layers, random weights)"
show "ds4cl-mkmodel -o tiny.gguf --preset tiny"
if ! "$bin/ds4cl-mkmodel" -o "$tmp/tiny.gguf" --preset tiny 2>"$tmp/mk.err"; then
    note "(DeepSeek's vocabulary is not available here: $(tail -n 1 "$tmp/mk.err"))"
    show "ds4cl-mkmodel -o tiny.gguf --preset tiny --tiny-vocab"
    "$bin/ds4cl-mkmodel" -o "$tmp/tiny.gguf" --preset tiny --tiny-vocab
else
    tail -n 1 "$tmp/mk.err"
fi

step "2. ds4cl -p on it, with the real CPU engine"
note "Random weights produce meaningless text: what matters is that the whole"
note "path runs (tokenizer, system prompt, prefill, sampling, the agent loop)."
mkdir "$tmp/empty"
show "ds4cl -m tiny.gguf --nothink -n 32 -p 'Say hello.'"
if "$bin/ds4cl" -m "$tmp/tiny.gguf" -C "$tmp/empty" --ctx 16384 --nothink -n 32 --seed 1 \
        -p "Say hello." >"$tmp/cpu.out" 2>"$tmp/cpu.err"; then
    printf 'answer: '; cat "$tmp/cpu.out"
    grep "tokens read" "$tmp/cpu.err" || tail -n 1 "$tmp/cpu.err"
else
    note "(skipped: $(tail -n 1 "$tmp/cpu.err"))"
fi

step "3. A scripted session with the real tools"
note "The script engine (--engine script:FILE) replays the model's replies from a"
note "JSON Lines file, token by token through the same sampler, DSML parser and"
note "tools. The workspace holds a C program with a typo in its greeting:"
ws="$tmp/workspace"
mkdir "$ws"
cat >"$ws/hello.c" <<'EOF'
#include <stdio.h>

int main(void)
{
    puts("Hello, wrold!");
    return 0;
}
EOF
cat "$ws/hello.c"
D='｜DSML｜'
call() { # tool name=value… (values are text)
    tool=$1; shift
    printf '\\n\\n<%stool_calls>\\n<%sinvoke name=\\"%s\\">\\n' "$D" "$D" "$tool"
    for kv in "$@"; do
        printf '<%sparameter name=\\"%s\\" string=\\"true\\">%s</%sparameter>\\n' "$D" "${kv%%=*}" "${kv#*=}" "$D"
    done
    printf '</%sinvoke>\\n</%stool_calls>' "$D" "$D"
}
{
    printf '{"assistant": "I should look at the file first.</think>Let me read hello.c.%s"}\n' \
        "$(call read path=hello.c)"
    printf '{"assistant": "The greeting says wrold.</think>The greeting has a typo; fixing it.%s", "expect": "wrold"}\n' \
        "$(call edit path=hello.c 'old=Hello, wrold!' 'new=Hello, world!')"
    printf '{"assistant": "Now build and run it.</think>%s"}\n' \
        "$(call bash 'command=cc -o hello hello.c && ./hello')"
    printf '{"assistant": "It printed the right greeting.</think>Fixed the typo in hello.c; it now prints \\"Hello, world!\\".", "expect": "Hello, world!"}\n'
} >"$tmp/session.jsonl"
show "ds4cl -m tiny.gguf --engine script:session.jsonl --yes -p 'Fix the greeting in hello.c and run it.'"
# The session is removed with the demo's directory: its closing line says
# so instead of offering a --resume that would find nothing.
{ "$bin/ds4cl" -m "$tmp/tiny.gguf" --engine "script:$tmp/session.jsonl" -C "$ws" --ctx 32768 --yes \
    -p "Fix the greeting in hello.c and run it." 2>&1; echo $? >"$tmp/status"; } |
    sed 's/ (continue it with --resume [^)]*)$/ (removed with the demo; yours are kept and resume with --resume ID)/'
status=$(cat "$tmp/status")
printf '\n%shello.c now:%s\n' "$bold" "$off"
cat "$ws/hello.c"
if [ -x "$ws/hello" ]; then printf '%s$ ./hello%s\n' "$dim" "$off"; "$ws/hello"; fi
if [ "$status" -ne 0 ]; then
    note "(the session ended with status $status)"
    exit "$status"
fi
