# tests/tap.sh - shared TAP helpers for the shell tests, sourced after `set -u`:
#   ok STATUS DESCRIPTION     print "ok N - ..." when STATUS is 0, else "not ok N - ..."
#   metric FILE SPLIT NAME    the last value of a --metrics-out JSON-lines file
tap_n=0
ok() {
    tap_n=$((tap_n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $tap_n - $2"; else echo "not ok $tap_n - $2"; fi
}
metric() {
    grep "\"split\":\"$2\",\"name\":\"$3\"" "$1" | tail -1 | sed 's/.*"value":\([^}]*\)}/\1/'
}
