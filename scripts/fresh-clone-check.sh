#!/usr/bin/env bash
# The README's two commands as a new user meets them: clone this repository's HEAD into a temporary
# folder with ../shared beside it, run `make test` and then `make demo` there under /usr/bin/time,
# and print each wall time, the pytest summary line and the demo's scoring rates. The timing
# lines of docs/benchmarks.md come from this script's output.
#   scripts/fresh-clone-check.sh            # both commands
#   scripts/fresh-clone-check.sh test       # only `make test` (or: demo)
#   KEEP=1 scripts/fresh-clone-check.sh     # keep the clone (its path is printed)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
shared="$(cd "$repo/.." && pwd)/shared"
commands=("${@:-test demo}")
read -r -a commands <<<"${commands[*]}"

work="$(mktemp -d /tmp/kcal-fresh-clone.XXXXXX)"
cleanup() { [ "${KEEP:-0}" = 1 ] || rm -rf "$work"; }
trap cleanup EXIT
git clone --quiet "$repo" "$work/main"
if [ -d "$shared" ]; then
    ln -s "$shared" "$work/shared"
else
    echo "fresh-clone-check: no $shared beside the repository; tests that read it will skip" >&2
fi
cd "$work/main"
echo "fresh-clone-check: $(git rev-parse --short HEAD) cloned into $work/main on $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

status=0
for cmd in "${commands[@]}"; do
    log="$work/make-$cmd.log"
    if /usr/bin/time -f "%e" -o "$work/time-$cmd" make "$cmd" >"$log" 2>&1; then
        result=ok
    else
        result="FAILED (exit $?)"
        status=1
    fi
    wall="$(tail -n 1 "$work/time-$cmd")"
    printf 'make %-5s %s: %.0f s (%d min %02d s) wall\n' "$cmd" "$result" "$wall" \
        "$((${wall%.*} / 60))" "$((${wall%.*} % 60))"
    case "$cmd" in
        test) grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed).* =+$| in [0-9.]+s' "$log" | tail -n 2 ;;
        # the scoring log's last line per partition: "scoring MODEL × RELATION (path): N/N statements, R/s, ETA 0s"
        demo) grep -oE 'scoring [^ ]+ × [^ ]+ \([a-z-]+\): ([0-9]+)/[0-9]+ statements, [0-9.]+/s, ETA 0s' "$log" || true ;;
    esac
    [ "$result" = ok ] || tail -n 40 "$log"
done
[ "${KEEP:-0}" = 1 ] && echo "fresh-clone-check: kept $work"
exit "$status"
