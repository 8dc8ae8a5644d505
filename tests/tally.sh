#!/bin/sh
# tests/tally.sh DIR - count every TAP result in DIR's .trs files and print the closing
# line "N passed, N failed, N skipped" (PASS/XFAIL count as passed; FAIL/XPASS/ERROR as
# failed; SKIP as skipped). A test program that errored counts once as failed.
dir=${1:-tests}
find "$dir" -name '*.trs' -exec cat {} + 2>/dev/null | awk '
  /^:test-result: (PASS|XFAIL)/ { p++ }
  /^:test-result: (FAIL|XPASS|ERROR)/ { f++ }
  /^:test-result: SKIP/ { s++ }
  END { printf "%d passed, %d failed, %d skipped\n", p, f, s }'
