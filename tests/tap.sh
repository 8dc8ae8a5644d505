# tests/tap.sh - shared TAP helpers for the shell tests, sourced after `set -u`:
#   ok STATUS DESCRIPTION     print "ok N - ..." when STATUS is 0, else "not ok N - ..."
#   metric FILE SPLIT NAME    the last value of a --metrics-out JSON-lines file
#   losses FILE               "step loss" per logged training step of such a file
#   same_curve F1 F2 TOL      the same logged steps, every loss within relative TOL (uses
#                             the caller's $tmp directory; prints the largest difference)
tap_n=0
ok() {
    tap_n=$((tap_n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $tap_n - $2"; else echo "not ok $tap_n - $2"; fi
}
metric() {
    grep "\"split\":\"$2\",\"name\":\"$3\"" "$1" | tail -1 | sed 's/.*"value":\([^}]*\)}/\1/'
}
losses() {
    grep '"split":"train","name":"loss"' "$1" \
        | sed 's/.*"step":\([0-9]*\).*"value":\([^}]*\)}/\1 \2/'
}
same_curve() {
    losses "$1" >"${tmp:?}/c1"; losses "$2" >"$tmp/c2"
    [ -s "$tmp/c1" ] && [ "$(wc -l <"$tmp/c1")" = "$(wc -l <"$tmp/c2")" ] || return 1
    paste -d' ' "$tmp/c1" "$tmp/c2" | awk -v tol="$3" '
        { n++; d = $2 - $4; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; if (d > md) md = d
          if ($1 != $3 || d > tol * m) { print "# step " $1 ": " $2 " vs step " $3 ": " $4; bad = 1 } }
        END { print "# " n " steps compared, largest difference " md + 0; exit bad }'
}
