#!/usr/bin/env bash
# Drive the real `kview` binary in tmux: kernel names on screen, `2 / xmma enter` leaves only
# matching rows, `y` puts a Markdown table of them into tmux's buffer (OSC 52 with
# set-clipboard on), `3` shows the ranges, `4` the layer bars, `6` the timeline (zoomed with +);
# with a second trace, `]` switches the views to it (the header names it) and `T 1` picks the
# first again; `q` quits.
# Usage: tests/tmux_smoke.sh TRACE [WIDTH HEIGHT] [FILTER WORD] [NVTX WORD] [SECOND TRACE]
set -u
trace=$1; w=${2:-160}; h=${3:-45}; word=${4:-xmma}; nvtx=${5:-profiled_step}; second=${6:-}
sock=kview-smoke-$$
t() { tmux -L "$sock" "$@"; }
fail() { echo "FAIL ($trace ${w}x${h}): $*"; t capture-pane -p -t kv | sed 's/^/  | /'; t kill-server 2>/dev/null; exit 1; }
wait_for() {  # wait_for TEXT [SECONDS]
  for _ in $(seq 1 $((${2:-30} * 5))); do t capture-pane -p -t kv | grep -qF -- "$1" && return 0; sleep 0.2; done
  return 1
}
t -f /dev/null new-session -d -s kv -x "$w" -y "$h" "kview '$trace' ${second:+'$second'}; sleep 0.5"
t set -g set-clipboard on
wait_for "summary by name" 60 || fail "kernel table never appeared"
t capture-pane -p -t kv | grep -qiE "kernel|gemm|elementwise|\[CUDA" || fail "no kernel names on screen"
# drawn the pane's width: the footer's last key ends at its right edge (a COLUMNS/LINES pair left
# in the environment, as pytest-xdist's workers have, must not size the explorer)
t capture-pane -p -t kv | grep -F "palette" | LC_ALL=C sed 's/[^ -~]//g' | awk -v w="$w" 'length($0) >= w - 4 {ok = 1} END {exit !ok}' \
  || fail "not drawn the pane's width ($w columns)"
# Each key waits for what the one before it shows: on a loaded machine keys typed before the
# filter box has focus would go to the table.
t send-keys -t kv 2
wait_for "summary by name" 10 || fail "2 does not show the kernels"
t send-keys -t kv /
wait_for "filter:" 10 || fail "no filter box"
t send-keys -t kv "$word"
wait_for "$word" 10 || fail "typed filter not shown"
t send-keys -t kv Enter
wait_for "filter: $word" 10 || fail "filter not applied"
rows=$(t capture-pane -p -t kv | sed -n '/^Time (%)/,/^───/p' | sed '1d;$d' | grep -c '[0-9]')
[ "$rows" -ge 1 ] || fail "no rows match $word"
# The label shows the filter at once and the rows follow once the filtered table is computed
# (seconds on a loaded machine): copy again until the copy holds only matching rows, or fail.
for _ in $(seq 1 20); do
  t send-keys -t kv y
  sleep 1
  buf=$(t show-buffer 2>/dev/null || true)
  echo "$buf" | grep -q '^| Time (%) |' && ! echo "$buf" | sed '1,2d' | grep -viq -- "$word" && break
done
echo "$buf" | grep -q '^| Time (%) |' || fail "tmux buffer holds no Markdown table"
echo "$buf" | sed '1,2d' | grep -viq -- "$word" && fail "copied rows that do not match $word"
# A view is known by what only it draws, and the check is of the screen that ended the wait:
# the Kernels view names NVTX ranges (its detail) and draws bars (its share column) too, and the
# pane may be caught mid-switch a moment later (the tabs' underline sliding, the new pane empty).
nvtx_shown() {  # the NVTX tree holds the word (a line of the tree's guides), or says there is none
  echo "$1" | grep -E "(├|└)── " | grep -qF -- "$nvtx" || echo "$1" | grep -qF "This trace has no NVTX ranges"
}
layers_shown() {  # the Layers legend and a row's bars (more than the legend's), or why there are none
  echo "$1" | grep -qF "No repeated layer" || { echo "$1" | grep -qF " · ordered by " && [ "$(echo "$1" | grep -c "█")" -ge 2 ]; }
}
t send-keys -t kv 3
for _ in $(seq 1 150); do screen=$(t capture-pane -p -t kv); nvtx_shown "$screen" && break; sleep 0.2; done
nvtx_shown "$screen" || fail "NVTX view does not show $nvtx"
t send-keys -t kv 4
for _ in $(seq 1 100); do screen=$(t capture-pane -p -t kv); layers_shown "$screen" && break; sleep 0.2; done
layers_shown "$screen" || fail "Layers view shows no bars"
t send-keys -t kv 6
# rows by their labels: the status line ("... ms/cell") can sit under the copy toast at 80x24
for _ in $(seq 1 150); do screen=$(t capture-pane -p -t kv); echo "$screen" | grep -qE "^(GPU|CUDA API|NVTX)|no GPU ops" && break; sleep 0.2; done
echo "$screen" | grep -qE "^(GPU|CUDA API|NVTX)|no GPU ops" || fail "Timeline view shows no rows"
for _ in $(seq 1 25); do  # the status line's time per cell (at 80x24 under the copy toast for a while)
  zoom=$(t capture-pane -p -t kv | grep -oE "[^ ]+ [^ ]+/cell" | head -1)
  [ -n "$zoom" ] && break
  sleep 0.2
done
t send-keys -t kv +
for _ in $(seq 1 50); do  # which changes once the zoom is drawn
  now=$(t capture-pane -p -t kv | grep -oE "[^ ]+ [^ ]+/cell" | head -1)
  [ -z "$zoom" ] || [ "$now" != "$zoom" ] && break
  sleep 0.2
done
t capture-pane -p -t kv | grep -qE "^(GPU|CUDA API|NVTX)" || fail "Timeline has no GPU, API or NVTX rows"
if [ -n "$second" ]; then
  wait_for "trace 1/2 (T)" 10 || fail "the header does not say which trace is shown"
  t send-keys -t kv 2
  wait_for "summary by name" 10 || fail "2 does not show the kernels"
  t send-keys -t kv "]"
  wait_for "trace 2/2 (T): $(basename "$second" | cut -c1-20)" 30 || fail "] did not switch to the second trace"
  wait_for "summary by name" 30 || fail "no kernel table for the second trace"
  t send-keys -t kv T
  wait_for "Show which trace" 10 || fail "T shows no trace picker"
  # the digit picks the first trace: Up could reach the list before the dialog put its cursor
  # on the trace shown (a loaded machine), and Enter would then pick that one again
  t send-keys -t kv 1
  wait_for "trace 1/2 (T)" 10 || fail "T did not switch back to the first trace"
  wait_for "summary by name" 30 || fail "no kernel table after switching back"
fi
t send-keys -t kv q
for _ in $(seq 1 50); do  # the pane ends (or its command does) once kview has quit
  t has-session -t kv 2>/dev/null && [ -n "$(t list-panes -t kv -F '#{pane_dead}' 2>/dev/null | grep 0)" ] && \
    t capture-pane -p -t kv | grep -q "summary by" || break
  sleep 0.2
done
t has-session -t kv 2>/dev/null && [ -n "$(t list-panes -t kv -F '#{pane_dead}' 2>/dev/null | grep 0)" ] && \
  t capture-pane -p -t kv | grep -q "summary by" && fail "q did not quit"
t kill-server 2>/dev/null
echo "ok $trace ${w}x${h}"
