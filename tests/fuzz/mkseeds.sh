#!/bin/sh
# mkseeds.sh BINDIR — writes the seeds of the session fuzz targets from a
# real session: `ds4cl -p` over the script engine on the tiny model
# (ds4cl-mkmodel --tiny-vocab), two turns with a tool call, then its
# journal (without its large first record, the system prompt) and
# meta.json into tests/fuzz/seeds/session_journal/ and
# tests/fuzz/seeds/session_meta/. The journal seeds carry the target's
# leading flag byte (0: as is, 1: checksums repaired after mutation).
# Snapshot seeds are made by the session_snapshot target itself (see
# tests/fuzz/session_snapshot.c); the DevTools seeds by
# tests/fuzz/record_cdp.js.
set -eu
bin=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ds4cl-seeds.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export XDG_DATA_HOME="$tmp/data" XDG_CACHE_HOME="$tmp/cache" XDG_STATE_HOME="$tmp/state"
"$bin/ds4cl-mkmodel" -q -o "$tmp/tiny.gguf" --tiny-vocab
mkdir -p "$tmp/ws"
printf 'hello\n' >"$tmp/ws/note.txt"
D='｜DSML｜'
{
    printf '{"assistant": "Look first.</think>Reading it.\\n\\n<%stool_calls>\\n<%sinvoke name=\\"read\\">\\n' "$D" "$D"
    printf '<%sparameter name=\\"path\\" string=\\"true\\">note.txt</%sparameter>\\n' "$D" "$D"
    printf '</%sinvoke>\\n</%stool_calls>"}\n' "$D" "$D"
    printf '{"assistant": "Done.</think>It says hello."}\n'
    printf '{"assistant": "Short.</think>Yes."}\n'
} >"$tmp/script.jsonl"
run() {
    (cd "$tmp/ws" && "$bin/ds4cl" -m "$tmp/tiny.gguf" --engine "script:$tmp/script.jsonl" --ctx 16384 --yes \
        --system "Be brief." "$@" >/dev/null)
}
run --session seed -p "What does note.txt say?"
run --session seed -p "Thanks; is that all?"
dir="$XDG_DATA_HOME/ds4cl/sessions/seed"
out="$root/tests/fuzz/seeds"
mkdir -p "$out/session_journal" "$out/session_meta"
# The system record (the whole prompt and its tokens, tens of KiB) is left
# out: the header, then every record after the first.
j="$dir/journal"
first=$(od -An -tu4 -j20 -N4 "$j" | tr -d ' ')
{ head -c 16 "$j"; tail -c +$((16 + 16 + first + 1)) "$j"; } >"$tmp/journal"
printf '\0' | cat - "$tmp/journal" >"$out/session_journal/two-turns"
printf '\1' | cat - "$tmp/journal" >"$out/session_journal/two-turns-fixed"
cp "$dir/meta.json" "$out/session_meta/two-turns.json"
ls -l "$out/session_journal" "$out/session_meta"
